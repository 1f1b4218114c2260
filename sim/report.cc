#include "baton/sim/report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/runtime/trace_json.h"

namespace baton::sim {
namespace {

using scheduler::NodeKind;

const char* Colour(NodeKind k) {
  switch (k) {
    case NodeKind::kForward: return "#4e79a7";
    case NodeKind::kRecompute: return "#9ecae9";
    case NodeKind::kBackward: return "#2c4f7c";
    case NodeKind::kAllGather: return "#59a14f";
    case NodeKind::kReduceScatter:
    case NodeKind::kAllReduce: return "#f28e2b";
    case NodeKind::kCopy:
    case NodeKind::kAccumulate: return "#b07aa1";
    case NodeKind::kOptimizer:
    case NodeKind::kCast: return "#76b7b2";
    case NodeKind::kDequantize: return "#b6992d";
    case NodeKind::kD2H:
    case NodeKind::kH2D: return "#e15759";
    case NodeKind::kSend:
    case NodeKind::kRecv: return "#edc948";
    case NodeKind::kBackwardWeight: return "#4e79a7";
    case NodeKind::kDispatch:
    case NodeKind::kCombine: return "#ff9da7";
  }
  return "#999999";
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

Status ValidateResult(const SimResult& r) {
  if (!(r.step_s > 0) || !std::isfinite(r.step_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", r.policy, ": the simulated step takes ", r.step_s,
        " s; a step must take a positive, finite time (check the cluster's "
        "rates: a step shorter than 1 ns cannot be resolved)"));
  }
  const std::pair<const char*, double> figures[] = {
      {"compute_s", r.compute_s},
      {"exposed_ag_s", r.exposed_ag_s},
      {"exposed_rs_s", r.exposed_rs_s},
      {"exposed_host_s", r.exposed_host_s},
      {"straggler_s", r.straggler_s},
      {"mfu", r.mfu},
      {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu},
      {"peak_memory_bytes", r.memory.peak()},
  };
  for (const auto& [name, value] : figures) {
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy ", r.policy, ": ", name, " is ", value,
          "; refusing to report a non-finite result"));
    }
  }
  return absl::OkStatus();
}

std::string TraceJson(const scheduler::StepGraph& g, const SimResult& r) {
  TraceJsonWriter trace;
  const std::vector<std::string> streams = g.stream_names();
  trace.ProcessName(0, "rank 0 (every rank is the same)");
  for (int s = 0; s < g.num_streams; ++s) trace.ThreadName(0, s, streams[s]);
  for (const Interval& iv : r.timeline) {
    const scheduler::Node& n = g.nodes[iv.node];
    trace.Complete(0, iv.stream.index(), n.name, scheduler::NodeKindName(n.kind),
                   iv.start_s * 1e6, (iv.end_s - iv.start_s) * 1e6);
  }
  // Memory: persistent state + arena buffers live from their first writer's
  // start to their last use's end.
  std::map<double, double> delta;
  std::vector<double> start(g.nodes.size()), end(g.nodes.size());
  for (const Interval& iv : r.timeline) {
    start[iv.node] = iv.start_s;
    end[iv.node] = iv.end_s;
  }
  for (size_t b = 0; b < g.buffers.size(); ++b) {
    if (g.buffers[b].persistent) continue;
    const double bytes = static_cast<double>(g.buffers[b].bytes());
    delta[start[g.first_write[b]]] += bytes;
    delta[end[g.last_use[b]]] -= bytes;
  }
  double live = r.memory.states;
  trace.Counter(0, "memory", 0, {{"bytes", live}});
  for (const auto& [t, d] : delta) {
    live += d;
    trace.Counter(0, "memory", t * 1e6, {{"bytes", live}});
  }
  return trace.Json();
}

std::string StepSvg(const scheduler::StepGraph& g, const SimResult& r,
                    const std::string& title) {
  const double width = 1200, left = 110, right = 20, lane = 46, top = 60;
  const int lanes = g.num_streams;
  const double height = top + lanes * lane + 70;
  const double span = std::max(r.step_s, 1e-9);
  auto x = [&](double t) { return left + (width - left - right) * t / span; };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      width, height);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.0f\" y=\"22\" font-size=\"15\" "
                        "font-weight=\"bold\">%s</text>\n",
                        left, Escape(title));
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%.0f\" y=\"42\">step %.3f s, MFU %.1f%%, exposed all-gather "
      "%.3f s, exposed reduce-scatter %.3f s</text>\n",
      left, r.step_s, 100 * r.mfu, r.exposed_ag_s, r.exposed_rs_s);
  const std::vector<std::string> names = g.stream_names();
  for (int s = 0; s < lanes; ++s) {
    const double y = top + s * lane;
    absl::StrAppendFormat(&svg,
                          "<text x=\"8\" y=\"%.0f\">%s</text>\n"
                          "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" "
                          "height=\"%.0f\" fill=\"#f4f4f4\"/>\n",
                          y + lane / 2 + 4, names[s], left, y + 4,
                          width - left - right, lane - 8);
  }
  // Nodes; the compute lane's idle gaps in red (exposed waiting).
  std::vector<Interval> tl = r.timeline;
  std::sort(tl.begin(), tl.end(), [](const Interval& a, const Interval& b) {
    return a.start_s < b.start_s;
  });
  double last_compute = 0;
  for (const Interval& iv : tl) {
    const scheduler::Node& n = g.nodes[iv.node];
    const double y = top + iv.stream.index() * lane;
    if (iv.stream.is_compute() && iv.start_s > last_compute + span * 1e-4) {
      absl::StrAppendFormat(
          &svg,
          "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" "
          "fill=\"#e15759\"><title>idle: waiting %.4f s</title></rect>\n",
          x(last_compute), y + 8, std::max(0.5, x(iv.start_s) - x(last_compute)),
          lane - 16, iv.start_s - last_compute);
    }
    if (iv.stream.is_compute()) last_compute = std::max(last_compute, iv.end_s);
    absl::StrAppendFormat(
        &svg,
        "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" "
        "fill=\"%s\" stroke=\"white\" stroke-width=\"0.3\"><title>%s: %.4f "
        "s</title></rect>\n",
        x(iv.start_s), y + 8, std::max(0.5, x(iv.end_s) - x(iv.start_s)),
        lane - 16, Colour(n.kind), Escape(n.name), iv.end_s - iv.start_s);
  }
  // Time axis.
  const double axis_y = top + lanes * lane + 10;
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
                        "stroke=\"black\"/>\n",
                        left, axis_y, width - right, axis_y);
  const double raw = span / 8;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  const double tick = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
  for (double t = 0; t <= span + 1e-12; t += tick) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" "
                          "stroke=\"black\"/><text x=\"%.1f\" y=\"%.0f\" "
                          "text-anchor=\"middle\">%g s</text>\n",
                          x(t), axis_y, x(t), axis_y + 5, x(t), axis_y + 18, t);
  }
  // Legend.
  const std::pair<const char*, const char*> legend[] = {
      {"forward", "#4e79a7"}, {"recompute", "#9ecae9"},
      {"backward", "#2c4f7c"}, {"all-gather", "#59a14f"},
      {"reduce-scatter", "#f28e2b"}, {"optimizer/cast", "#76b7b2"},
      {"copies", "#b07aa1"}, {"compute idle (exposed)", "#e15759"}};
  double lx = left;
  const double ly = axis_y + 36;
  for (const auto& [label, colour] : legend) {
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" "
                          "fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                          lx, ly - 10, colour, lx + 16, ly, label);
    lx += 30 + 7.0 * std::string(label).size();
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace baton::sim
