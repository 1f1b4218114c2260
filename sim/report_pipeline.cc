// Pictures and tables of a simulated pipeline (sim/report.h).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/runtime/trace_json.h"
#include "baton/sim/report.h"

namespace baton::sim {
namespace {

constexpr double kGiB = 1073741824.0;

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

const char* PassColour(scheduler::NodeKind k) {
  switch (k) {
    case scheduler::NodeKind::kForward: return "#4e79a7";
    case scheduler::NodeKind::kRecompute: return "#9ecae9";
    case scheduler::NodeKind::kBackward: return "#2c4f7c";
    case scheduler::NodeKind::kBackwardWeight: return "#76b7b2";
    case scheduler::NodeKind::kAllGather: return "#59a14f";
    case scheduler::NodeKind::kSend:
    case scheduler::NodeKind::kRecv: return "#edc948";
    default: return "#f28e2b";
  }
}

}  // namespace

std::string StagesText(const SimResult& r) {
  std::string out = absl::StrFormat(
      "# pipeline: bubble %.1f%% of the span from the first forward to the last "
      "backward (%.3f s); the busiest stage waits %.3f s on receives, %.3f s on "
      "tensor collectives\n%-6s %6s %8s %7s %9s %8s %26s %5s\n",
      100 * r.bubble, r.pipeline_span_s, r.exposed_pp_s, r.exposed_tp_s, "stage", "blocks",
      "busy_s", "bubble", "in_flight", "peak_GiB", "(states+act+logits+rsv)", "fits");
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const SimResult::Stage& st = r.stages[s];
    const MemoryBreakdown& m = st.memory;
    absl::StrAppendFormat(&out, "%-6zu %6d %8.3f %6.1f%% %9d %8.1f %26s %5s\n", s, st.layers,
                          st.busy_s, 100 * st.bubble, st.in_flight, m.peak() / kGiB,
                          absl::StrFormat("(%.1f+%.1f+%.1f+%.1f)", m.states / kGiB,
                                          (m.activations + m.dispatch) / kGiB, m.logits / kGiB,
                                          m.reserved / kGiB),
                          st.fits ? "yes" : "NO");
  }
  return out;
}

nlohmann::json StagesJson(const SimResult& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (const SimResult::Stage& st : r.stages) {
    stages.push_back({{"blocks", st.layers},
                      {"busy_s", st.busy_s},
                      {"bubble", st.bubble},
                      {"in_flight", st.in_flight},
                      {"peak_memory_bytes", st.memory.peak()},
                      {"states_bytes", st.memory.states},
                      {"activation_bytes", st.memory.activations},
                      {"fits", st.fits}});
  }
  return {{"bubble", r.bubble},
          {"span_s", r.pipeline_span_s},
          {"exposed_pp_s", r.exposed_pp_s},
          {"exposed_tp_s", r.exposed_tp_s},
          {"stages", stages}};
}

std::string PipelineTraceJson(const scheduler::ParallelStep& step, const SimResult& r) {
  TraceJsonWriter trace;
  for (const scheduler::StepGraph& g : step.stages) {
    trace.ProcessName(g.stage, absl::StrCat("stage ", g.stage, " (its ranks are alike)"));
    const std::vector<std::string> names = g.stream_names();
    for (int s = 0; s < g.num_streams; ++s) trace.ThreadName(g.stage, s, names[s]);
  }
  for (const Interval& iv : r.timeline) {
    const scheduler::Node& n = step.stages[iv.stage].nodes[iv.node];
    trace.Complete(iv.stage, iv.stream.index(), n.name, scheduler::NodeKindName(n.kind),
                   iv.start_s * 1e6, (iv.end_s - iv.start_s) * 1e6);
  }
  return trace.Json();
}

std::string PipelineSvg(const scheduler::ParallelStep& step, const SimResult& r,
                        const std::string& title) {
  const int stages = static_cast<int>(step.stages.size());
  const double width = 1200, left = 110, right = 20, lane = 22, top = 60;
  const double height = top + 2 * stages * lane + 60;
  const double span = std::max(r.step_s, 1e-9);
  auto x = [&](double t) { return left + (width - left - right) * t / span; };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n"
      "<text x=\"%.0f\" y=\"42\">step %.3f s, MFU %.1f%%, bubble %.1f%%</text>\n",
      width, height, left, Escape(title), left, r.step_s, 100 * r.mfu, 100 * r.bubble);
  for (int s = 0; s < stages; ++s) {
    for (int k = 0; k < 2; ++k) {
      const double y = top + (2 * s + k) * lane;
      absl::StrAppendFormat(&svg,
                            "<text x=\"8\" y=\"%.0f\">stage %d %s</text><rect x=\"%.0f\" "
                            "y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"%s\"/>\n",
                            y + lane / 2 + 4, s, k == 0 ? "compute" : "comm", left, y + 2,
                            width - left - right, lane - 4, k == 0 ? "#fbe3e3" : "#f4f4f4");
    }
  }
  for (const Interval& iv : r.timeline) {
    const scheduler::Node& n = step.stages[iv.stage].nodes[iv.node];
    if (n.kind == scheduler::NodeKind::kRecv) continue;  // its wait, not work
    const double y = top + (2 * iv.stage + (iv.stream.is_compute() ? 0 : 1)) * lane;
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" "
                          "fill=\"%s\"><title>%s: %.4f s</title></rect>\n",
                          x(iv.start_s), y + 3, std::max(0.4, x(iv.end_s) - x(iv.start_s)),
                          lane - 6, PassColour(n.kind), Escape(n.name), iv.end_s - iv.start_s);
  }
  const double axis_y = top + 2 * stages * lane + 10;
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
                        "stroke=\"black\"/><text x=\"%.0f\" y=\"%.0f\">0 s</text>"
                        "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%.3f s</text>\n"
                        "<text x=\"%.0f\" y=\"%.0f\">forward blue, backward dark blue, "
                        "weight pass teal, sends yellow, collectives orange / green; the "
                        "pink under a compute lane is its idle time (the bubble)</text>\n",
                        left, axis_y, width - right, axis_y, left, axis_y + 14, width - right,
                        axis_y + 14, span, left, axis_y + 34);
  svg += "</svg>\n";
  return svg;
}

}  // namespace baton::sim
