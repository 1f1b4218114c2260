// A trace in the Chrome / Perfetto trace-event JSON format (the "JSON
// Object Format" of the Trace Event Format document), which
// https://ui.perfetto.dev and chrome://tracing open:
//   {"displayTimeUnit": "ms", "traceEvents": [event, ...]}
// with the events the project writes: metadata ("M": process and thread
// names and sort indices), complete slices ("X": a name, a category, a start
// and a duration on one thread) and counters ("C": named values at a time
// on one process). Times are microseconds, as the format wants.
//
// Strings (names, categories, argument keys and values) are escaped as JSON
// requires (quote, backslash, control characters); bytes that are not
// valid UTF-8 are written as U+FFFD, so the output always parses. Keys of
// an event are written in sorted order; events in the order they were
// added.
//
// Used by sim/report.cc (the simulated step) and scheduler/step_trace.cc
// (executed steps). Not thread-safe: one writer per thread.
#ifndef BATON_RUNTIME_TRACE_JSON_H_
#define BATON_RUNTIME_TRACE_JSON_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "baton/runtime/status.h"

namespace baton {

// An argument of an event ("args" in the format): an integer, a number or
// a string.
using TraceArgValue = std::variant<int64_t, double, std::string>;
using TraceArgs = std::vector<std::pair<std::string, TraceArgValue>>;

class TraceJsonWriter {
 public:
  TraceJsonWriter();
  ~TraceJsonWriter();
  TraceJsonWriter(const TraceJsonWriter&) = delete;
  TraceJsonWriter& operator=(const TraceJsonWriter&) = delete;

  // Metadata: the name of process `pid` / thread `tid` of it, and where the
  // viewer sorts them (lower first).
  void ProcessName(int pid, const std::string& name);
  void ProcessSortIndex(int pid, int index);
  void ThreadName(int pid, int tid, const std::string& name);
  void ThreadSortIndex(int pid, int tid, int index);

  // A slice of `dur_us` from `ts_us` on thread `tid` of process `pid`; no
  // "args" key when `args` is empty.
  void Complete(int pid, int tid, const std::string& name,
                const std::string& category, double ts_us, double dur_us,
                const TraceArgs& args = {});

  // The counter track `name` of process `pid` takes `values` at `ts_us`.
  void Counter(int pid, const std::string& name, double ts_us,
               const TraceArgs& values);

  // Events added so far.
  size_t size() const;

  // The whole trace as one line of JSON (no trailing newline).
  std::string Json() const;

  // Json() and a newline into `path` (replacing it), every write, flush and
  // close checked (runtime/output_file.h); Unavailable naming the path if it
  // cannot be written.
  Status Write(const std::string& path) const;

 private:
  struct Events;  // the JSON array; its type stays out of this header
  std::unique_ptr<Events> events_;
};

}  // namespace baton

#endif  // BATON_RUNTIME_TRACE_JSON_H_
