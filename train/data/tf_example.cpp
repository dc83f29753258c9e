// tf.train.Example <-> EncodedExample (tf_example.h), with the generated
// Protobuf classes of example.proto.
#include "terngrad/train/tf_example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <limits>

#include "example.pb.h"

namespace terngrad::train {
namespace {

namespace pb = terngrad::tfexample;

const char* kind_name(const pb::Feature& f) {
  switch (f.kind_case()) {
    case pb::Feature::kBytesList: return "bytes_list";
    case pb::Feature::kFloatList: return "float_list";
    case pb::Feature::kInt64List: return "int64_list";
    default: return "no kind";
  }
}

const pb::Feature& feature(const pb::Example& ex, const std::string& key, pb::Feature::KindCase kind,
                           const char* kind_wanted, const std::string& where) {
  const auto& map = ex.features().feature();
  const auto it = map.find(key);
  if (it == map.end()) throw DataError(where + ": feature " + key + " is missing");
  if (it->second.kind_case() != kind)
    throw DataError(where + ": feature " + key + " is a " + kind_name(it->second) + ", expected a " + kind_wanted);
  return it->second;
}

const std::string& bytes_feature(const pb::Example& ex, const std::string& key, const std::string& where) {
  const pb::Feature& f = feature(ex, key, pb::Feature::kBytesList, "bytes_list", where);
  if (f.bytes_list().value_size() != 1)
    throw DataError(where + ": feature " + key + " holds " + std::to_string(f.bytes_list().value_size()) +
                    " values, expected 1");
  return f.bytes_list().value(0);
}

int64_t int64_feature(const pb::Example& ex, const std::string& key, const std::string& where) {
  const pb::Feature& f = feature(ex, key, pb::Feature::kInt64List, "int64_list", where);
  if (f.int64_list().value_size() != 1)
    throw DataError(where + ": feature " + key + " holds " + std::to_string(f.int64_list().value_size()) +
                    " values, expected 1");
  return f.int64_list().value(0);
}

void set_bytes(pb::Example& ex, const std::string& key, std::string_view v) {
  (*ex.mutable_features()->mutable_feature())[key].mutable_bytes_list()->add_value(std::string(v));
}
void set_int64(pb::Example& ex, const std::string& key, int64_t v) {
  (*ex.mutable_features()->mutable_feature())[key].mutable_int64_list()->add_value(v);
}

}  // namespace

EncodedExample parse_tf_example(std::string_view record, const std::string& where) {
  pb::Example ex;
  // ParseFromArray bounds every length by the input it was given, so a
  // damaged record costs at most its own size.
  if (record.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !ex.ParseFromArray(record.data(), static_cast<int>(record.size())))
    throw DataError(where + ": not a tf.train.Example (" + std::to_string(record.size()) + " bytes do not parse)");
  EncodedExample e;
  e.where = where;
  const std::string& format = bytes_feature(ex, "image/format", where);
  try {
    e.format = parse_image_format(format, where);
  } catch (const ImageError& err) {
    throw DataError(std::string(err.what()) + " (feature image/format)");
  }
  const int64_t label = int64_feature(ex, "image/class/label", where);
  if (label < std::numeric_limits<int32_t>::min() || label > std::numeric_limits<int32_t>::max())
    throw DataError(where + ": feature image/class/label is " + std::to_string(label) + ", outside int32");
  e.label = static_cast<int32_t>(label);
  if (e.format == ImageFormat::kRaw) {
    e.raw_height = int64_feature(ex, "image/height", where);
    e.raw_width = int64_feature(ex, "image/width", where);
    e.raw_channels = int64_feature(ex, "image/channels", where);
  }
  const std::string& encoded = bytes_feature(ex, "image/encoded", where);
  e.bytes.assign(encoded.begin(), encoded.end());
  return e;
}

std::string make_tf_example(std::string_view encoded, const std::string& format_name, int64_t label, int64_t height,
                            int64_t width, int64_t channels) {
  pb::Example ex;
  set_bytes(ex, "image/encoded", encoded);
  set_bytes(ex, "image/format", format_name);
  set_int64(ex, "image/class/label", label);
  set_int64(ex, "image/height", height);
  set_int64(ex, "image/width", width);
  set_int64(ex, "image/channels", channels);
  // Deterministic: map entries in key order, so equal examples give equal
  // bytes (converter output is reproducible and can be compared).
  std::string out;
  {
    google::protobuf::io::StringOutputStream sos(&out);
    google::protobuf::io::CodedOutputStream cos(&sos);
    cos.SetSerializationDeterministic(true);
    ex.SerializeToCodedStream(&cos);
  }  // the streams hand back their unused buffer space when destroyed
  return out;
}

}  // namespace terngrad::train
