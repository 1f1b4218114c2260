#include "baton/scheduler/optimizer_state.h"

namespace baton::scheduler {

Moments8bitLayout Moments8bitLayoutFor(int64_t n) {
  Moments8bitLayout l;
  l.blocks = (n + kQuantBlockNumel - 1) / kQuantBlockNumel;
  l.codes1 = 0;
  l.codes2 = n;
  l.absmax1 = (2 * n + 3) / 4 * 4;
  l.absmax2 = l.absmax1 + 4 * l.blocks;
  l.bytes = l.absmax2 + 4 * l.blocks;
  return l;
}

}  // namespace baton::scheduler
