// The memory report (sim/memory_report.h) against published memory
// figures. Each row names its source, baton's configuration and the
// published figure; the "within 10%" rows must be, the "tracked" rows
// (where baton leaves out a framework's own terms, named in the row) are
// printed with their error and held to their stated bound. The table is
// printed; docs/memory.md reproduces it.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "baton/runtime/input_file.h"
#include "baton/sim/memory_report.h"
#include "baton/sim/simulator.h"
#include "gtest/gtest.h"

namespace baton::sim {
namespace {

using scheduler::BaseDtype;
using scheduler::ModelPreset;
using scheduler::ModelSpec;
using scheduler::Offload;
using scheduler::OptimizerKind;
using scheduler::Policy;
using scheduler::PolicyPreset;
using scheduler::StepGraph;

constexpr double kGiB = 1073741824.0;

// 24 GB consumer GPUs (RTX 3090 / 4090 class) as sim/data/consumer_24gb.json
// (docs/memory.md) describes them: the 0.5 GiB reserve is the allocator's
// slack beyond the schedule (the published figures are PyTorch's
// max_memory_reserved, which leaves out the CUDA context).
ClusterSpec Consumer24() {
  ClusterSpec c = *ClusterPreset("h100");
  c.name = "consumer_24gb";
  auto text = ReadInputFile("sim/data/consumer_24gb.json", "cluster file", 1 << 20);
  EXPECT_TRUE(text.ok()) << text.status();
  if (text.ok()) {
    const Status s = ApplyClusterJson(*text, c);
    EXPECT_TRUE(s.ok()) << s;
  }
  return c;
}

struct SimRun {
  StepGraph graph;
  SimResult result;
  MemoryReport memory;
};

// Simulates `policy` (its micro_steps set from the workload) with
// `recompute` blocks recomputed.
SimRun Simulate(const ModelSpec& m, const ClusterSpec& c, const Workload& w, Policy p,
             int recompute) {
  p.micro_steps = static_cast<int>(w.global_batch / w.gpus / w.micro_batch);
  p.reduce_every_micro_step = p.micro_steps > 1;
  SimRun r;
  auto res = SimulatePolicy(m, c, w, p, recompute, {}, &r.graph);
  EXPECT_TRUE(res.ok()) << res.status();
  if (res.ok()) r.result = *res;
  r.memory = ReportMemory(r.graph, c, w);
  return r;
}

Workload OneGpu() {
  Workload w;
  w.gpus = 1;
  w.seq = 2048;
  w.global_batch = 1;
  return w;
}

// The frozen base weights of a run, over all its GPUs.
double FrozenBytes(const StepGraph& g) {
  double bytes = 0;
  for (const scheduler::GraphBuffer& b : g.buffers) {
    const scheduler::Bucket& bk = g.layout.buckets[b.bucket];
    if (b.persistent && bk.frozen &&
        (b.role == scheduler::BufferRole::kShard || b.role == scheduler::BufferRole::kHostShard)) {
      bytes += static_cast<double>(b.bytes()) * (g.layout.sharding.shard ? g.layout.sharding.ranks : 1);
    }
  }
  return bytes;
}

// Llama-2 7B QLoRA / LoRA as Answer.AI's train.py runs it (FSDP over 2
// GPUs, rank 64, alpha 16, targets q, k, v, gate, up, down, gradient
// checkpointing of every block).
SimRun AnswerAi(const char* model, bool nf4, int seq, int batch, Offload offload) {
  Workload w;
  w.gpus = 2;
  w.seq = seq;
  w.micro_batch = batch;
  w.global_batch = 2 * batch;
  Policy p = *PolicyPreset("fsdp1");
  p.layout.lora_rank = 64;
  p.layout.lora_alpha = 16;
  p.layout.lora_targets = *scheduler::ParseLoraTargets("q,k,v,gate,up,down");
  if (nf4) p.layout.base_dtype = BaseDtype::kNf4;
  p.offload = offload;
  return Simulate(*ModelPreset(model), Consumer24(), w, p, -1);
}

struct Row {
  std::string source, what;
  double published, baton;
  double bound = 0.10;      // the relative error allowed
  std::string note;         // why a tracked row is outside 10%
};

TEST(MemoryValidationTest, PublishedFiguresWithinTenPercent) {
  std::vector<Row> rows;
  const ModelSpec l8 = *ModelPreset("llama3-8b");
  // bf16 mixed precision, AdamW, one GPU (nothing sharded).
  const SimRun plain = Simulate(l8, *ClusterPreset("h100"), OneGpu(), *PolicyPreset("baton"), -1);
  Policy q8 = *PolicyPreset("baton");
  q8.optimizer = OptimizerKind::kAdamW8bit;
  const SimRun eight = Simulate(l8, *ClusterPreset("h100"), OneGpu(), q8, -1);
  const double n = static_cast<double>(plain.memory.parameters);
  const char* hf = "HF transformers docs, GPU memory usage (model_memory_anatomy)";
  rows.push_back({hf, "weights, bf16 mixed precision: 6 bytes/param", 6,
                  plain.memory.weights / n});
  rows.push_back({hf, "AdamW states: 8 bytes/param", 8, plain.memory.optimizer / n});
  rows.push_back({hf, "quantized Adam (bitsandbytes): 2 bytes/param", 2,
                  eight.memory.optimizer / n});
  rows.push_back({"bitsandbytes docs, 8-bit optimizers",
                  "75% less optimizer memory (percent)", 75,
                  100 * (1 - eight.memory.optimizer / plain.memory.optimizer)});

  // QLoRA section 3: double quantization stores the constants in
  // 8 / 64 + 32 / (64 * 256) = 0.127 bits per parameter.
  Workload two;
  two.gpus = 2;
  two.seq = 2048;
  two.global_batch = 2;
  Policy lora = *PolicyPreset("baton");
  lora.layout.lora_rank = 64;
  const SimRun bf16 = Simulate(*ModelPreset("llama2-70b"), Consumer24(), two, lora, -1);
  Policy qlora = lora;
  qlora.layout.base_dtype = BaseDtype::kNf4;
  qlora.offload = Offload::kParams;
  const SimRun nf4 = Simulate(*ModelPreset("llama2-70b"), Consumer24(), two, qlora, -1);
  double nf4_numel = 0, nf4_bytes = 0;
  for (const scheduler::Bucket& b : nf4.graph.layout.buckets) {
    if (!b.nf4) continue;
    nf4_numel += static_cast<double>(b.padded_numel);
  }
  for (const scheduler::GraphBuffer& b : nf4.graph.buffers) {
    if (b.persistent && nf4.graph.layout.buckets[b.bucket].nf4) {
      nf4_bytes += static_cast<double>(b.bytes()) * 2;  // 2 shards
    }
  }
  rows.push_back({"QLoRA (Dettmers et al. 2023), section 3",
                  "double-quantized constants: 0.127 bits/param", 0.127,
                  8 * nf4_bytes / nf4_numel - 4});
  const char* aai = "Answer.AI, You can now train a 70b language model at home (2024)";
  rows.push_back({aai, "llama2-70b base in 16 bits: 140 GB", 140e9, FrozenBytes(bf16.graph)});
  rows.push_back({aai, "... in 4 bits (QLoRA): 35 GB", 35e9, FrozenBytes(nf4.graph)});

  // ZeRO (Rajbhandari et al. 2020) figure 1: a 7.5B model on 64 GPUs with
  // mixed-precision Adam: 16 bytes a parameter (2 + 2 + 12): 120 GB per GPU
  // replicated, 1.9 GB fully sharded (P_os+g+p).
  ModelSpec z = l8;
  z.name = "llama-7.5b";
  z.vocab = 32000;
  z.intermediate = 11008;
  z.kv_heads = 32;
  z.layers = 36;
  const double zn = static_cast<double>(scheduler::ParameterCount(z));
  Workload w64;
  w64.gpus = 64;
  w64.seq = 2048;
  w64.global_batch = 64;
  Policy ddp = *PolicyPreset("ddp");
  ddp.reduce_dtype = DataType::kBF16;  // fp16 gradients, as ZeRO's baseline
  ddp.param_dtype = DataType::kBF16;
  const SimRun base = Simulate(z, *ClusterPreset("a100"), w64, ddp, -1);
  const SimRun zero3 = Simulate(z, *ClusterPreset("a100"), w64, *PolicyPreset("zero3"), -1);
  auto states = [&](const SimRun& r) {
    return (r.memory.weights + r.memory.gradients + r.memory.optimizer) * 7.5e9 / zn;
  };
  const char* zero = "ZeRO (Rajbhandari et al. 2020), figure 1, 7.5B on 64 GPUs";
  rows.push_back({zero, "data parallel baseline: 120 GB/GPU", 120e9, states(base)});
  rows.push_back({zero, "ZeRO-3 (P_os+g+p): 1.9 GB/GPU", 1.9e9, states(zero3)});

  // Answer.AI's fsdp_qlora benchmarks (benchmarks_03_2024.md): peak
  // reserved memory per GPU, Llama-2 7B on 2 x 24 GB, batch 1.
  const char* bench = "Answer.AI fsdp_qlora benchmarks_03_2024.md, Llama-2 7B, 2 GPUs";
  auto peak = [](const SimRun& r) { return r.result.memory.peak() / kGiB; };
  rows.push_back({bench, "QLoRA, context 512, batch 1: 4.98 GiB", 4.98,
                  peak(AnswerAi("llama2-7b", true, 512, 1, Offload::kNone))});
  rows.push_back({bench, "QLoRA, context 2048, batch 1: 5.21 GiB", 5.21,
                  peak(AnswerAi("llama2-7b", true, 2048, 1, Offload::kNone))});
  rows.push_back({bench, "LoRA, context 512, batch 1: 10.24 GiB", 10.24,
                  peak(AnswerAi("llama2-7b", false, 512, 1, Offload::kNone))});
  rows.push_back({bench, "LoRA, context 2048, batch 1: 10.22 GiB", 10.22,
                  peak(AnswerAi("llama2-7b", false, 2048, 1, Offload::kNone))});
  // Tracked: larger batches, where Hugging Face's Llama keeps its logits in
  // fp32 beside the bf16 ones and the loss's fp32 intermediates (about 12
  // bytes a token and vocabulary entry where baton counts 6), plus LoRA
  // dropout's masks in the recomputed block.
  const std::string logits = "HF's fp32 logits copies and LoRA dropout not modelled";
  rows.push_back({bench, "QLoRA, context 2048, batch 4: 11.22 GiB", 11.22,
                  peak(AnswerAi("llama2-7b", true, 2048, 4, Offload::kNone)), 0.30, logits});
  rows.push_back({bench, "LoRA, context 2048, batch 4: 16.14 GiB", 16.14,
                  peak(AnswerAi("llama2-7b", false, 2048, 4, Offload::kNone)), 0.30, logits});
  rows.push_back({"Answer.AI fsdp_qlora benchmarks_03_2024.md, Llama-2 70B, 2 GPUs",
                  "QLoRA + CPU offload, context 2048, batch 2: 14.92 GiB", 14.92,
                  peak(AnswerAi("llama2-70b", true, 2048, 2, Offload::kParams)), 0.15, logits});

  int within = 0;
  std::printf("%-62s %-55s %12s %12s %8s\n", "source", "figure", "published", "baton",
              "error");
  for (const Row& r : rows) {
    const double err = r.baton / r.published - 1;
    const bool ten = std::abs(err) <= 0.10;
    within += ten;
    std::printf("%-62s %-55s %12.4g %12.4g %+7.1f%%%s\n", r.source.c_str(), r.what.c_str(),
                r.published, r.baton, 100 * err,
                r.note.empty() ? "" : ("  (tracked: " + r.note + ")").c_str());
    EXPECT_LE(std::abs(err), r.bound) << r.source << ": " << r.what;
  }
  std::printf("%d of %zu figures within 10%%\n", within, rows.size());
  EXPECT_GE(within, 5);
  // The acceptance case: llama2-70b QLoRA with rank 64 on two 24 GB GPUs
  // fits (with Answer.AI's CPU offload of the frozen weights).
  EXPECT_TRUE(nf4.result.fits) << nf4.result.memory.peak() / kGiB << " GiB";
}

// The report's six parts are the simulator's peak, and weights, gradients
// and optimizer state are StateBytes, for each policy and technique.
TEST(MemoryReportTest, PartsSumToThePeakAndTheStates) {
  Workload w;
  w.gpus = 8;
  w.seq = 2048;
  w.global_batch = 16;
  for (const char* name : {"baton", "fsdp1", "fsdp2", "zero3", "ddp", "zero_offload"}) {
    for (int t = 0; t < 4; ++t) {
      SCOPED_TRACE(::testing::Message() << name << " technique " << t);
      Policy p = *PolicyPreset(name);
      if (t == 1) p.optimizer = OptimizerKind::kAdamW8bit;
      if (t >= 2) p.layout.lora_rank = 16;
      if (t == 3 && !p.all_reduce) p.layout.base_dtype = BaseDtype::kNf4;
      const SimRun r = Simulate(*ModelPreset("llama3-8b"), *ClusterPreset("h100"), w, p, -1);
      EXPECT_NEAR(r.memory.total(), r.result.memory.peak(), 1.0);
      EXPECT_NEAR(r.memory.weights + r.memory.gradients + r.memory.optimizer,
                  StateBytes(r.graph), 1.0);
      EXPECT_NEAR(r.memory.host(), static_cast<double>(r.graph.host_bytes), 1.0);
      if (t >= 2) {
        EXPECT_LT(r.memory.trainable, r.memory.parameters / 50);
      }
    }
  }
}

}  // namespace
}  // namespace baton::sim
