#include "baton/scheduler/nf4_layout.h"

namespace baton::scheduler {

Nf4Packing Nf4PackingFor(int64_t n) {
  Nf4Packing p;
  p.codes = 0;
  p.absmax = (n + 1) / 2;
  const int64_t blocks = (n + kNf4BlockNumel - 1) / kNf4BlockNumel;
  p.scales = (p.absmax + blocks + 3) / 4 * 4;
  const int64_t groups = (blocks + kNf4GroupBlocks - 1) / kNf4GroupBlocks;
  p.bytes = p.scales + 4 * groups;
  return p;
}

}  // namespace baton::scheduler
