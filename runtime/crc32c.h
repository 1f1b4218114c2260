// CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected: 0x82F63B78), the
// checksum of iSCSI, ext4 metadata, LevelDB and gRPC: what checkpoint files
// carry per block (scheduler/checkpoint_format.h).
//
//   Crc32c(data, n)            the CRC of n bytes (initial value 0).
//   Crc32cExtend(crc, data, n) the CRC of the bytes that gave `crc`
//                              followed by these n: Crc32c(ab) ==
//                              Crc32cExtend(Crc32c(a), b).
// On x86-64 CPUs with SSE4.2 (checked once at run time) the crc32
// instruction runs it at several GB/s per core; elsewhere a table-driven
// loop (slicing by 8) at about 1 GB/s. Both give the same values
// (Crc32c("123456789") == 0xE3069283, the standard check value).
//
// Stateless; thread-safe.
#ifndef BATON_RUNTIME_CRC32C_H_
#define BATON_RUNTIME_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace baton {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// The portable loop (tests compare it with the instruction path).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);

}  // namespace baton

#endif  // BATON_RUNTIME_CRC32C_H_
