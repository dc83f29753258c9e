// CRC-32C (Castagnoli), the checksum of TFRecord framing: the TFRecord
// datasets (tfrecord.h) and the TensorBoard event files (experiments/) both
// frame their records with it. Standard library only (its own library,
// terngrad::crc32c), so the TensorBoard writer links it without the trainer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace terngrad::train {

// CRC-32C of n bytes (reflected polynomial 0x82F63B78, initial value and
// final xor 0xFFFFFFFF). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, std::size_t n);

// TFRecord stores CRCs "masked" so that a CRC of data that itself contains
// CRCs does not degenerate: rotate right by 15 and add a constant.
uint32_t mask_crc32c(uint32_t crc);

}  // namespace terngrad::train
