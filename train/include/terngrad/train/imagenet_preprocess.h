// ImageNet preprocessing of the TernGrad authors' TF code
// (terngrad/inception/image_processing.py, vgg_preprocessing.py), per net,
// for training and evaluation: a decoded uint8 image of any size becomes a
// float 224x224x3 HWC example.
//
// Every style is "take a window of the source, resize it bilinearly to
// (resized_h, resized_w), cut the 224x224 crop at (crop_y, crop_x), maybe
// mirror it, then map the values" (ImageGeometry); only how the window, size
// and crop are chosen differs:
//   alexnet    train: whole image -> 256x256 (aspect ignored), random crop, flip,
//                     x*255 - RGB mean; eval: 256x256, centre crop, x*255 - mean.
//   vgg        train: whole image, smallest side S uniform in [256, 512]
//                     (aspect kept), random crop, flip, x*255 - mean;
//              eval:  smallest side 256, centre crop, x*255 - mean.
//   inception  train: window from sample_distorted_bounding_box (whole image as
//                     the object box), -> 224x224, flip, colour distortion,
//                     clip to [0, 1], (x - 0.5) * 2;
//              eval:  tf.image.central_crop(0.875) window, -> 224x224, (x - 0.5) * 2.
// "x" is the pixel on [0, 1] (uint8 / 255) as TF's decode + convert_image_dtype
// give it, so x*255 - mean is the uint8 value minus the mean.
//
// Bilinear resize: TF1's resize_bilinear with align_corners=False and no
// half-pixel centres: output pixel (y, x) samples the source at
// (y * in_h / out_h, x * in_w / out_w), interpolating between floor and
// floor + 1 clamped to the last row/column. Resizing the window to the full
// resized size and then cropping is computed directly for the crop's pixels
// only (the same values: each output pixel depends only on its coordinates).
//
// Deviations from the TF code, on purpose:
//   * vgg: TernGrad's vgg_preprocessing subtracts the 0..255 means from images
//     already on [0, 1] (image_processing.py decodes with convert_image_dtype),
//     giving inputs near -120; we subtract them from x*255 like alexnet, which
//     is what the slim VGG weights expect.
//   * inception: TF picks the colour-op order and the resize method by the
//     preprocessing thread's id (thread_id % 2, % 4), so results depend on which
//     thread took the image. We draw the order from the example's seed (both
//     orders occur) and always resize bilinearly.
//   * DCT-scaled JPEG decoding (libjpeg scale_num/scale_denom) is not used:
//     it changes pixel values compared with a full decode plus this resize.
//
// Reproducibility: every random choice is a pure function of the example's
// seed (counter-based SplitMix64, as fill_batch), so a batch's contents do not
// depend on which thread preprocessed which example.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/train/image_codec.h"

namespace terngrad::train {

inline constexpr int64_t kImageNetSide = 224;
inline constexpr float kImageNetMean[3] = {123.68f, 116.78f, 103.94f};  // R, G, B on 0..255

enum class ImageStyle { kAlexNet, kVgg, kInception };

struct ImagePreprocess {
  ImageStyle style = ImageStyle::kAlexNet;
  bool train = true;
};

// The one table from net to ImageNet preprocessing style: alexnet -> alexnet,
// vgg_a / vgg_* -> vgg, googlenet / inception* -> inception. Throws
// std::invalid_argument naming the net for any other.
ImageStyle image_style_for_net(const std::string& net);
const char* image_style_name(ImageStyle s);

// Where the output comes from (source pixel coordinates and sizes).
struct ImageGeometry {
  int64_t window_y = 0, window_x = 0, window_h = 0, window_w = 0;  // slice of the source
  int64_t resized_h = 0, resized_w = 0;  // the window is resized to this
  int64_t crop_y = 0, crop_x = 0;        // 224x224 crop of the resized window
  bool flip = false;                     // mirror the crop left-right
};

// The colour distortion of inception training (TF's distort_color), on [0, 1].
struct ColorDistortion {
  bool contrast_second = false;  // order brightness, contrast, saturation, hue (else b, s, h, c)
  float brightness = 0;          // added; uniform in [-32/255, 32/255]
  float saturation = 1;          // factor; uniform in [0.5, 1.5]
  float hue = 0;                 // added to hue (in turns); uniform in [-0.2, 0.2]
  float contrast = 1;            // factor around each channel's mean; uniform in [0.5, 1.5]
};

struct ImageAugment {
  ImageGeometry geometry;
  bool distort_color = false;  // inception training only
  ColorDistortion color;
};

// The geometry (and colour draw) for an image of height x width under p.
// Training styles draw from example_seed; evaluation ignores it.
ImageAugment draw_image_augment(const ImagePreprocess& p, uint64_t example_seed, int64_t height, int64_t width);

// Decoded image (1 or 3 channels; gray is replicated) -> out, 224*224*3
// floats HWC. Throws std::invalid_argument on an empty image.
void preprocess_image(const Image& img, const ImagePreprocess& p, uint64_t example_seed, float* out);

// ---- The building blocks, exposed for tests and tools ---------------------

// tf.image.sample_distorted_bounding_box with the whole image as the object
// box: up to 100 attempts of aspect ratio (w/h) uniform in [0.75, 1.33] and a
// height giving an area fraction in [0.05, 1.0] that also covers >= 0.1 of the
// image, at an offset uniform in [0, H - h) x [0, W - w) as TF's kernel
// draws it; the whole image when none fits. Returns (y, x, h, w).
struct CropBox {
  int64_t y = 0, x = 0, h = 0, w = 0;
};
CropBox sample_distorted_box(uint64_t seed, int64_t height, int64_t width);

// tf.image.central_crop(image, 0.875): per side, start = int((n - n*0.875)/2),
// size = n - 2*start.
CropBox central_crop_box(int64_t height, int64_t width, double fraction = 0.875);

// vgg's _smallest_size_at_least: scale = side / min(h, w) in float32,
// new = int(h * scale), int(w * scale).
void smallest_side_size(int64_t height, int64_t width, int64_t side, int64_t& new_h, int64_t& new_w);

// The fast path: the 224x224 (crop of the resized window, flipped if asked)
// of src (C = 3 channels), as floats on 0..255, into out.
void resize_crop_bilinear(const Image& src, const ImageGeometry& g, float* out);

// A plain float64 reference of the whole bilinear resize of the window
// (resized_h x resized_w x channels), for tests.
std::vector<double> resize_bilinear_reference(const Image& src, int64_t window_y, int64_t window_x, int64_t window_h,
                                              int64_t window_w, int64_t out_h, int64_t out_w);

// distort_color in place on n RGB pixels on [0, 1] (no clipping).
void apply_color_distortion(float* rgb, int64_t pixels, const ColorDistortion& c);

}  // namespace terngrad::train
