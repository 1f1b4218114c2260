#include "baton/ops/testing/attention_reference.h"

#include <algorithm>
#include <cmath>

#include "baton/ops/testing/test_util.h"

namespace baton::ops::testing {

AttentionReference Float64Attention(const AttentionShape& s, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& v,
                                    const std::vector<double>& dout) {
  const int64_t d = s.head_dim, qw = s.heads * d, kw = s.kv_heads * d;
  const bool backward = !dout.empty();
  AttentionReference r;
  r.out.assign(s.batch * s.seq * qw, 0);
  r.lse.assign(s.batch * s.heads * s.seq, 0);
  if (backward) {
    r.dq.assign(r.out.size(), 0);
    r.dk.assign(s.batch * s.seq * kw, 0);
    r.dv.assign(r.dk.size(), 0);
  }
  const double c = 1 / std::sqrt(static_cast<double>(d));
  auto Q = [&](int64_t b, int64_t i, int64_t h) { return (b * s.seq + i) * qw + h * d; };
  auto K = [&](int64_t b, int64_t j, int64_t g) { return (b * s.seq + j) * kw + g * d; };
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / (s.heads / s.kv_heads);
      for (int64_t i = 0; i < s.seq; ++i) {
        std::vector<double> p(i + 1);
        double m = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += q[Q(b, i, h) + e] * k[K(b, j, g) + e];
          m = std::max(m, p[j] = c * dot);
        }
        double l = 0;
        for (double& x : p) l += (x = std::exp(x - m));
        for (double& x : p) x /= l;
        r.lse[(b * s.heads + h) * s.seq + i] = m + std::log(l);
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < d; ++e) r.out[Q(b, i, h) + e] += p[j] * v[K(b, j, g) + e];
        if (!backward) continue;
        double dd = 0;
        for (int64_t e = 0; e < d; ++e) dd += dout[Q(b, i, h) + e] * r.out[Q(b, i, h) + e];
        for (int64_t j = 0; j <= i; ++j) {
          double dpv = 0;
          for (int64_t e = 0; e < d; ++e) dpv += dout[Q(b, i, h) + e] * v[K(b, j, g) + e];
          const double ds = p[j] * (dpv - dd);
          for (int64_t e = 0; e < d; ++e) {
            r.dq[Q(b, i, h) + e] += c * ds * k[K(b, j, g) + e];
            r.dk[K(b, j, g) + e] += c * ds * q[Q(b, i, h) + e];
            r.dv[K(b, j, g) + e] += p[j] * dout[Q(b, i, h) + e];
          }
        }
      }
    }
  return r;
}

AttentionCase MakeAttentionCase(Device& device, Stream& stream, const AttentionShape& s) {
  const DataType t = s.dtype;
  AttentionCase c;
  const int64_t rows = s.batch * s.seq;
  c.nq = rows * s.heads * s.head_dim;
  c.nk = rows * s.kv_heads * s.head_dim;
  c.q = Round(Random(c.nq, 1 + c.nq), t);
  c.k = Round(Random(c.nk, 2 + c.nq), t);
  c.v = Round(Random(c.nk, 3 + c.nq), t);
  c.dout = Round(Random(c.nq, 4 + c.nq), t);
  c.bq = Upload(device, stream, Pack(c.q, t));
  c.bk = Upload(device, stream, Pack(c.k, t));
  c.bv = Upload(device, stream, Pack(c.v, t));
  c.bdo = Upload(device, stream, Pack(c.dout, t));
  const size_t es = DataTypeSize(t);
  c.bo = Poisoned(device, stream, c.nq * es);
  c.blse = Poisoned(device, stream, s.batch * s.heads * s.seq * 4);
  c.bdq = Poisoned(device, stream, c.nq * es);
  c.bdk = Poisoned(device, stream, c.nk * es);
  c.bdv = Poisoned(device, stream, c.nk * es);
  return c;
}

}  // namespace baton::ops::testing
