// tf.train.Example records holding one labelled image, as TF's converters
// write them (slim's download_and_convert_{mnist,cifar10}.py, inception's
// build_imagenet_data.py):
//   image/encoded      bytes   PNG or JPEG file bytes, or raw HWC pixels
//   image/format       bytes   "png", "JPEG", "raw" (any case)
//   image/class/label  int64   the class (ImageNet: 1..1000, 0 = background)
//   image/height, image/width, image/channels  int64  (required for raw only)
// Other features (image/class/text, bounding boxes, ...) are ignored.
#pragma once

#include <string>
#include <string_view>

#include "terngrad/train/example_source.h"

namespace terngrad::train {

// Parses one record's bytes. `where` names the file and record; a record
// that is not an Example, a missing feature and a feature of the wrong kind
// (or with no value) are DataErrors naming `where` and the feature. The label
// is taken as stored (int32 range checked); range checks against a number of
// classes are the caller's.
EncodedExample parse_tf_example(std::string_view record, const std::string& where);

// The Example for one image, for converters and tests: image/encoded,
// image/format (format_name), image/class/label, image/height, image/width,
// image/channels.
std::string make_tf_example(std::string_view encoded, const std::string& format_name, int64_t label, int64_t height,
                            int64_t width, int64_t channels);

}  // namespace terngrad::train
