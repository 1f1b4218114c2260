// The CUDA launchers of the ops, called by their .cc files (which hold the
// math, the conventions and the argument checks). Plain header: included by
// nvcc. dtype codes are DataType's values (0 f32, 1 bf16); each returns a
// cudaError_t value.
#ifndef BATON_OPS_KERNELS_H_
#define BATON_OPS_KERNELS_H_

#include <cstdint>

namespace baton::ops_internal {

int LaunchRmsNormForward(const void* x, const void* w, void* y, float* rstd,
                         int64_t tokens, int64_t hidden, int dtype, float eps,
                         void* stream);
int LaunchRmsNormBackward(const void* dy, const void* x, const void* w,
                          const float* rstd, void* dx, bool accumulate_dx,
                          void* dw, int dw_dtype, bool accumulate_dw,
                          int64_t tokens, int64_t hidden, int dtype,
                          void* stream);

int LaunchSwiGluForward(const void* g, const void* u, void* h, int64_t n,
                        int dtype, void* stream);
int LaunchSwiGluBackward(const void* dh, const void* g, const void* u,
                         void* dg, void* du, int64_t n, int dtype,
                         void* stream);

int LaunchRotary(void* x, int64_t rows, int64_t seq, int64_t heads,
                 int64_t head_dim, double theta, double sign, int dtype,
                 void* stream);

int LaunchEmbeddingForward(const int32_t* ids, const void* table, void* y,
                           int64_t tokens, int64_t vocab, int64_t hidden,
                           int dtype, void* stream);
int LaunchEmbeddingBackward(const int32_t* ids, const void* dy, void* dtable,
                            int dtable_dtype, bool accumulate, int64_t tokens,
                            int64_t vocab, int64_t hidden, int dtype,
                            void* stream);

// Limits of the CUDA attention kernels (a query row's scores live in shared
// memory; BackwardKV keeps head_dim / 128 accumulators per thread).
constexpr int64_t kAttentionCudaMaxSeq = 4096;
constexpr int64_t kAttentionCudaMaxHeadDim = 512;

int LaunchAttentionForward(const void* q, const void* k, const void* v,
                           void* out, float* lse, int64_t batch, int64_t seq,
                           int64_t heads, int64_t kv_heads, int64_t head_dim,
                           int dtype, void* stream);
int LaunchAttentionBackward(const void* dout, const void* q, const void* k,
                            const void* v, const void* out, const float* lse,
                            void* dq, void* dk, void* dv, int64_t batch,
                            int64_t seq, int64_t heads, int64_t kv_heads,
                            int64_t head_dim, int dtype, void* stream);

// ops/vocab_parallel.h: `start` / `rows` this rank's vocabulary rows out
// of `vocab`.
int LaunchVocabEmbeddingForward(const int32_t* ids, const void* table, void* y, int64_t tokens,
                                int64_t start, int64_t rows, int64_t vocab, int64_t hidden,
                                int dtype, void* stream);
int LaunchVocabEmbeddingBackward(const int32_t* ids, const void* dy, void* dtable,
                                 int dtable_dtype, bool accumulate, int64_t tokens,
                                 int64_t start, int64_t rows, int64_t vocab, int64_t hidden,
                                 int dtype, void* stream);
int LaunchVocabRowMax(const void* logits, float* row_max, int64_t tokens, int64_t rows,
                      int dtype, void* stream);
int LaunchVocabSums(const void* logits, const int32_t* targets, const float* row_max,
                    float* sum_exp, float* target_logit, int64_t tokens, int64_t start,
                    int64_t rows, int64_t vocab, int dtype, void* stream);
int LaunchVocabLoss(const void* logits, const int32_t* targets, const float* row_max,
                    const float* sum_exp, const float* target_logit, float* loss, void* dlogits,
                    float grad_scale, int64_t tokens, int64_t start, int64_t rows, int64_t vocab,
                    int dtype, void* stream);

int LaunchCrossEntropy(const void* logits, const int32_t* targets, float* loss,
                       void* dlogits, float grad_scale, int64_t tokens,
                       int64_t vocab, int dtype, void* stream);

int LaunchAdamW(float* master, const void* grad, int grad_dtype, float* m1,
                float* m2, void* param, int param_dtype, int64_t n,
                float grad_scale, float lr, float beta1, float beta2, float eps,
                float weight_decay, float bc1, float bc2, void* stream);

// ops/adamw8bit.h's per-call constants, each computed as its CPU path does.
struct AdamW8bitHyper {
  float scale, beta1, omb1, beta2, omb2, decay, lr, bc1, bc2, eps;
};
// param_dtype -1: no param output. code1 / code2: the 256 host values of
// the signed / unsigned code (copied into the launch's arguments).
int LaunchAdamW8bit(float* master, const void* grad, int grad_dtype,
                    uint8_t* m1, uint8_t* m2, float* absmax1, float* absmax2,
                    void* param, int param_dtype, int64_t n,
                    const AdamW8bitHyper& h, const float* code1,
                    const float* code2, void* stream);

// ops/nf4.h: the packing's absmax and scales byte offsets and size
// (Nf4LayoutFor); code4 / code8 the 16 NF4 and 256 unsigned dynamic-code
// host values (copied into the launch's arguments).
int LaunchNf4Pack(const float* values, int64_t n, void* packed, int64_t absmax_at,
                  int64_t scales_at, int64_t bytes, const float* code4,
                  const float* code8, void* stream);
int LaunchNf4Dequantize(const void* packed, int64_t n, int64_t absmax_at,
                        int64_t scales_at, void* out, int out_dtype,
                        const float* code4, const float* code8, void* stream);

// ops/lora.h's ScaleInPlace: p[i] *= s (dtype f32 or bf16).
int LaunchScale(void* p, int64_t n, int dtype, float s, void* stream);

}  // namespace baton::ops_internal

#endif  // BATON_OPS_KERNELS_H_
