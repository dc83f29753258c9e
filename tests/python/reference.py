"""Float64 references for the Python tests, written from quantize/FORMAT.md
and the README's scale definition, independent of libterngrad."""
import numpy as np


def reference_decode(payload):
    """(float64 values, scale) of a terngrad payload."""
    p = np.frombuffer(bytes(payload), np.uint8)
    n = int(np.frombuffer(p[8:16].tobytes(), "<u8")[0])
    scale = float(np.frombuffer(p[16:20].tobytes(), "<f4")[0])
    codes = ((p[40:, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3).reshape(-1)[:n]
    assert not np.any(codes == 3), "reserved code in payload"
    return np.where(codes == 1, scale, np.where(codes == 2, -scale, 0.0)), scale


def reference_scale(g, clip):
    """s = min(max|g|, clip * sigma); clip 0 means max|g|."""
    g = np.asarray(g, np.float64)
    m = np.abs(g).max()
    return m if clip == 0 or clip * g.std() >= m else clip * g.std()
