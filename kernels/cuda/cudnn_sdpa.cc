/* cudnn_sdpa.cc: kernels/sdpa.h's fused attention on cuDNN
 * (kernels/cuda/cudnn_sdpa.h), over the graph API of the cuDNN frontend, for
 * a CUDA build whose configure found the frontend's headers. Each call is a
 * graph of one SDPA node: the forward (bf16 in and out, fp32 compute, Stats
 * generated) or the backward (Q, K, V, O, dO, Stats to dQ, dK, dV in bf16).
 *
 * - libcudnn is opened here at run time and the frontend finds every cuDNN
 *   function in it (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: its calls go
 *   through dlsym of cudnn_frontend::cudnn_dlhandle, which its user defines
 *   and opens, as below), so a CUDA build links nothing of cuDNN and runs
 *   without it; bk_cudnn_sdpa_available says what is missing.
 * - The graphs are built by bk_sdpa_prepare and kept for the life of the
 *   process in one table, keyed by what a plan depends on (device,
 *   direction, heads, head dim, scale, band, number of sequences, longest
 *   sequence on each side): a ring step finds its plans and compiles
 *   nothing. A ragged call (n_seq > 1) also keeps the device copy of its
 *   sequence lengths and offsets made then, keyed by its layout.
 * - One cuDNN handle per device, shared by the threads: a handle must not be
 *   used by two threads at once, so a call holds its device's lock while it
 *   sets the handle's stream (q's) and queues the work; nothing waits for
 *   the GPU.
 * - The frontend is compiled with exceptions (its loader and a few of its
 *   builders throw even under NV_CUDNN_DISABLE_EXCEPTION): every entry point
 *   catches them, so none reaches C.
 * - A call's tensors are views of our row-major buffers, never copies: a
 *   side's [b, h, s, d] starts at the lowest row of its sequences, with
 *   strides (s h d, d, h d, 1); in a ragged call each sequence starts at an
 *   int32 offset from there, in elements, as cuDNN's ragged tensors take it,
 *   which bounds the rows one call spans to 2^31 elements of a side.
 *
 * A prepared call's failures come back through bk_device_failed, so that
 * bk_kernel_error() carries cuDNN's or the frontend's words:
 * BK_ERR_UNSUPPORTED when cuDNN refuses a graph, BK_ERR_DEVICE when the
 * device or cuDNN fails, BK_ERR_ARG for a call that was not prepared or a
 * workspace smaller than its plan needs. */
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cudnn_frontend.h>

#include "kernels/cuda/cudnn_sdpa.h"
#include "kernels/device_ops.h"
#include "kernels/sdpa_graph.h"

namespace fe = cudnn_frontend;

/* Where the frontend looks cuDNN's functions up (cudnn_frontend_shim.h
 * declares it; load_cudnn opens it). */
void *cudnn_frontend::cudnn_dlhandle = nullptr;

namespace
{

using Graph = fe::graph::Graph;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

/* The soname of cuDNN 9, the major these headers describe. */
const char CUDNN_LIBRARY[] = "libcudnn.so.9";
enum { MAX_DEVICES = 64, MAX_OPERANDS = 32 };

/* ------------------------------------------------------------------ errors */

void put_why(char *why, size_t why_len, const std::string &text)
{
    if (why && why_len) snprintf(why, why_len, "%s", text.c_str());
}

/* kind, with call and text kept for bk_kernel_error. */
bk_status failed(bk_status kind, const char *call, const std::string &text)
{
    (void)bk_device_failed(call, text.c_str());
    return kind;
}

bk_status cuda_failed(const char *call, cudaError_t e)
{
    (void)cudaGetLastError();
    return failed(BK_ERR_DEVICE, call, cudaGetErrorString(e));
}

/* Whether a frontend error is the device's or the runtime's, not a refusal
 * of the graph (not validated, no engine for it). */
bool device_side(const fe::error_t &e)
{
    return e.code == fe::error_code_t::CUDA_API_FAILED ||
           e.code == fe::error_code_t::INVALID_CUDA_DEVICE ||
           e.code == fe::error_code_t::HANDLE_ERROR ||
           e.code == fe::error_code_t::GRAPH_EXECUTION_FAILED;
}

/* f(), or BK_ERR_DEVICE with the message of what it threw. */
template <class F> bk_status guarded(const char *call, F &&f)
{
    try {
        return f();
    } catch (const std::exception &e) {
        return failed(BK_ERR_DEVICE, call, e.what());
    }
}

/* ------------------------------------------------------------------ the library */

/* "" once libcudnn is open, else why it cannot be. Tried once: the frontend
 * keeps every symbol it has looked up. The frontend opens a CUDA runtime
 * too, the first of libcudart.so.12 and .13 it finds unless
 * CUDNN_FRONTEND_CUDART_LIB_NAME names one: it is named here, the one this
 * program is linked with, where the user has not named another. */
const std::string &load_cudnn()
{
    static std::once_flag once;
    static std::string error;
    std::call_once(once, [] {
        std::string cudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
        setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart.c_str(), 0);
        fe::cudnn_dlhandle = dlopen(CUDNN_LIBRARY, RTLD_NOW | RTLD_LOCAL);
        if (fe::cudnn_dlhandle) return;
        const char *why = dlerror();
        error = std::string("cannot load ") + CUDNN_LIBRARY + " (cuDNN 9): " + (why ? why : "");
    });
    return error;
}

/* cudnnGetVersion of the loaded libcudnn (91900 for 9.19.0), 0 when none is. */
long loaded_version()
{
    if (!load_cudnn().empty()) return 0;
    try {
        return static_cast<long>(fe::detail::get_backend_version());
    } catch (const std::exception &) {
        return 0;
    }
}

std::string version_text(long v)
{
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
           std::to_string(v % 100);
}

/* "" unless version v has known bugs in what we run: cuDNN 9.10.0 and 9.10.1
 * compute the fp16/bf16 SDPA backward wrongly (the frontend refuses them
 * too). */
std::string version_problem(long v)
{
    if (v != 91000 && v != 91001) return "";
    return "cuDNN " + version_text(v) +
           " has known bugs in the bf16 SDPA backward (its release notes): use 9.10.2 or newer";
}

/* "" when the current device is of compute capability 8.x or 9.x (cuDNN
 * serves more, but these are the ones this project builds for and checks),
 * else why not. */
std::string device_problem()
{
    int dev = 0, major = 0, minor = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return std::string("no CUDA device: ") + cudaGetErrorString(e);
    }
    if (major == 8 || major == 9) return "";
    return "device " + std::to_string(dev) + " is of compute capability " + std::to_string(major) +
           "." + std::to_string(minor) + "; cuDNN's attention is used on 8.x and 9.x";
}

std::string availability_problem()
{
    std::string why = load_cudnn();
    if (why.empty()) why = version_problem(loaded_version());
    if (why.empty()) why = device_problem();
    return why;
}

/* ------------------------------------------------------------------ a call */

/* How cuDNN's tensors see a call: b = n_seq batch elements of the longest
 * sequence on each side, from the lowest row on each side. */
struct Extent {
    int64_t b, s_q, s_kv;
    int64_t q_row, kv_row;
    bool ragged;
};

Extent extent_of(const bk_sdpa_call &c)
{
    Extent x = {c.n_seq, 0, 0, INT64_MAX, INT64_MAX, c.n_seq > 1};
    for (int k = 0; k < c.n_seq; k++) {
        const bk_sdpa_seq &s = c.seq[k];
        x.s_q = std::max(x.s_q, s.q_len), x.s_kv = std::max(x.s_kv, s.kv_len);
        x.q_row = std::min(x.q_row, s.q_row), x.kv_row = std::min(x.kv_row, s.kv_row);
    }
    return x;
}

std::string band_problem(const bk_sdpa_band &b)
{
    if (b.align != BK_SDPA_TOP_LEFT && b.align != BK_SDPA_BOTTOM_RIGHT)
        return "unknown band alignment";
    if (b.has_right && (b.right < 0 || b.right > INT_MAX))
        return "right bound " + std::to_string(b.right) + " outside 0 .. INT_MAX";
    if (b.has_left && (b.left < 1 || b.left > INT_MAX))
        return "left bound " + std::to_string(b.left) + " outside 1 .. INT_MAX";
    return "";
}

/* "" when a ragged call's lengths and offsets fit cuDNN's int32 tensors. */
std::string ragged_problem(const bk_sdpa_call &c, const Extent &x)
{
    int64_t q_width = (int64_t)c.h_q * c.d, kv_width = (int64_t)c.h_kv * c.d;
    for (int k = 0; k < c.n_seq && x.ragged; k++) {
        const bk_sdpa_seq &s = c.seq[k];
        if ((s.q_row - x.q_row + s.q_len) * q_width > INT32_MAX ||
            (s.kv_row - x.kv_row + s.kv_len) * kv_width > INT32_MAX)
            return "sequence " + std::to_string(k) +
                   " ends past the 2^31 elements a ragged call's int32 offsets reach";
    }
    return "";
}

/* "" when c is a call kernels/sdpa.h allows and cuDNN's fields can hold, else
 * what is wrong with it. */
std::string call_problem(const bk_sdpa_call *c)
{
    if (!c || c->n_seq < 1 || !c->seq) return "a call has at least one sequence";
    if (c->h_q < 1 || c->h_kv < 1 || c->h_q % c->h_kv) return "h_q is not a multiple of h_kv";
    if (c->d < 8 || c->d > 128 || c->d % 8)
        return "head dim " + std::to_string(c->d) + " is not 8, 16, .. 128";
    if (!std::isfinite(c->scale) || c->scale <= 0) return "the scale is not finite and positive";
    for (int k = 0; k < c->n_seq; k++) {
        const bk_sdpa_seq &s = c->seq[k];
        if (s.q_row < 0 || s.kv_row < 0 || s.q_len < 1 || s.kv_len < 1)
            return "sequence " + std::to_string(k) + " has a negative row or an empty side";
    }
    std::string why = band_problem(c->band);
    return why.empty() ? ragged_problem(*c, extent_of(*c)) : why;
}

/* ------------------------------------------------------------------ graphs */

/* The tensors' uids: a call's buffers; its sequence lengths; and at
 * OFFSETS_UID + a buffer's uid, that buffer's ragged offsets. */
enum : int64_t { Q_UID = 1, K_UID, V_UID, O_UID, DO_UID, DQ_UID, DK_UID, DV_UID, STATS_UID };
enum : int64_t { SEQ_LEN_Q_UID = 20, SEQ_LEN_KV_UID, OFFSETS_UID = 100 };

bool on_query_side(int64_t uid)
{
    return uid == Q_UID || uid == O_UID || uid == DO_UID || uid == DQ_UID;
}

/* A [n, 1, 1, 1] int32 input: sequence lengths or ragged offsets. */
Tensor index_tensor(Graph &g, int64_t uid, int64_t n)
{
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name("index_" + std::to_string(uid))
                        .set_uid(uid)
                        .set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(fe::DataType_t::INT32));
}

/* t as kernels/sdpa_graph.c describes it: [b, h, s, d] bf16 over a
 * row-major buffer; in a ragged call each batch element starts at its
 * offset instead of b's stride. */
void describe_bshd(Graph &g, const Tensor &t, const char *name, int64_t uid,
                   const bk_sdpa_tensor &x, bool ragged)
{
    t->set_name(name)
        .set_uid(uid)
        .set_data_type(fe::DataType_t::BFLOAT16)
        .set_dim({x.dim[0], x.dim[1], x.dim[2], x.dim[3]})
        .set_stride({x.stride[0], x.stride[1], x.stride[2], x.stride[3]});
    if (ragged) t->set_ragged_offset(index_tensor(g, OFFSETS_UID + uid, x.dim[0] + 1));
}

Tensor bshd_input(Graph &g, const char *name, int64_t uid, const bk_sdpa_tensor &x, bool ragged)
{
    Tensor t = g.tensor(fe::graph::Tensor_attributes());
    describe_bshd(g, t, name, uid, x, ragged);
    return t;
}

/* Stats [b, h_q, s_q, 1] fp32, as described (packed). */
void describe_stats(const Tensor &t, const bk_sdpa_tensor &x)
{
    t->set_name("Stats")
        .set_uid(STATS_UID)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({x.dim[0], x.dim[1], x.dim[2], x.dim[3]})
        .set_stride({x.stride[0], x.stride[1], x.stride[2], x.stride[3]});
}

/* The band (kernels/sdpa.h's bounds are the frontend's) and, in a ragged
 * call, the padding mask over each sequence's lengths: what the attributes of
 * either direction take. */
template <class Attributes>
void set_mask(Graph &g, Attributes &a, const bk_sdpa_graph &d)
{
    a.set_diagonal_alignment(d.band.align == BK_SDPA_BOTTOM_RIGHT
                                 ? fe::DiagonalAlignment_t::BOTTOM_RIGHT
                                 : fe::DiagonalAlignment_t::TOP_LEFT);
    if (d.band.has_right) a.set_diagonal_band_right_bound(static_cast<int>(d.band.right));
    if (d.band.has_left) a.set_diagonal_band_left_bound(static_cast<int>(d.band.left));
    if (d.ragged)
        a.set_padding_mask(true)
            .set_seq_len_q(index_tensor(g, SEQ_LEN_Q_UID, d.q.dim[0]))
            .set_seq_len_kv(index_tensor(g, SEQ_LEN_KV_UID, d.q.dim[0]));
}

void add_forward(Graph &g, const bk_sdpa_graph &d)
{
    bool r = d.ragged != 0;
    Tensor Q = bshd_input(g, "Q", Q_UID, d.q, r), K = bshd_input(g, "K", K_UID, d.k, r);
    Tensor V = bshd_input(g, "V", V_UID, d.v, r);
    fe::graph::SDPA_attributes a;
    a.set_name("sdpa").set_generate_stats(d.generate_stats != 0).set_attn_scale(d.attn_scale);
    set_mask(g, a, d);
    auto out = g.sdpa(Q, K, V, a);
    describe_bshd(g, out[0], "O", O_UID, d.o, r);
    describe_stats(out[1], d.stats);
    out[0]->set_output(true);
    out[1]->set_output(true);
}

/* The backward leaves max_total_seq_len unset: it would size dQ's fp32
 * accumulator by the packed rows, where our offsets leave gaps. dO and dQ
 * are laid out as O and Q, dK and dV as K and V. */
void add_backward(Graph &g, const bk_sdpa_graph &d)
{
    bool r = d.ragged != 0;
    Tensor Q = bshd_input(g, "Q", Q_UID, d.q, r), K = bshd_input(g, "K", K_UID, d.k, r);
    Tensor V = bshd_input(g, "V", V_UID, d.v, r), O = bshd_input(g, "O", O_UID, d.o, r);
    Tensor dO = bshd_input(g, "dO", DO_UID, d.o, r), stats = g.tensor(fe::graph::Tensor_attributes());
    describe_stats(stats, d.stats);
    fe::graph::SDPA_backward_attributes a;
    a.set_name("sdpa_backward").set_attn_scale(d.attn_scale);
    set_mask(g, a, d);
    auto grad = g.sdpa_backward(Q, K, V, O, dO, stats, a);
    describe_bshd(g, grad[0], "dQ", DQ_UID, d.q, r);
    describe_bshd(g, grad[1], "dK", DK_UID, d.k, r);
    describe_bshd(g, grad[2], "dV", DV_UID, d.v, r);
    for (const Tensor &t : grad) t->set_output(true);
}

/* The graph of call c in one direction, for compute capability sm (0: the
 * current device's, which the frontend asks for), from kernels/sdpa_graph.c's
 * description of it: the one the emulator's model of cuDNN checks. NULL for
 * a call call_problem refuses. */
std::shared_ptr<Graph> make_graph(const bk_sdpa_call &c, int backward, int sm)
{
    bk_sdpa_graph d;
    if (bk_sdpa_describe(&c, &d) != 0) return nullptr;
    auto g = std::make_shared<Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    /* before the node is added: a node keeps a copy of the graph's context */
    if (sm > 0) g->set_sm_version(sm);
    if (backward)
        add_backward(*g, d);
    else
        add_forward(*g, d);
    return g;
}

/* ------------------------------------------------------------------ the table of plans */

/* What a plan depends on: the call but for where its rows start and, in a
 * ragged call, how its sequences lie (only the device copy of the offsets
 * depends on that). */
struct PlanKey {
    int device, backward, h_q, h_kv, d, n_seq;
    float scale;
    bk_sdpa_band band;
    int64_t s_q, s_kv;
};

bool same_band(const bk_sdpa_band &a, const bk_sdpa_band &b)
{
    return a.align == b.align && a.has_right == b.has_right && a.has_left == b.has_left &&
           (!a.has_right || a.right == b.right) && (!a.has_left || a.left == b.left);
}

bool operator==(const PlanKey &a, const PlanKey &b)
{
    return a.device == b.device && a.backward == b.backward && a.h_q == b.h_q && a.h_kv == b.h_kv &&
           a.d == b.d && a.n_seq == b.n_seq && a.scale == b.scale && same_band(a.band, b.band) &&
           a.s_q == b.s_q && a.s_kv == b.s_kv;
}

PlanKey key_of(int device, int backward, const bk_sdpa_call &c, const Extent &x)
{
    return {device, backward, c.h_q, c.h_kv, c.d, c.n_seq, c.scale, c.band, x.s_q, x.s_kv};
}

/* A ragged call's sequences with rows counted from the lowest row on each
 * side; none for a dense call. */
std::vector<bk_sdpa_seq> layout_of(const bk_sdpa_call &c, const Extent &x)
{
    std::vector<bk_sdpa_seq> layout;
    for (int k = 0; k < c.n_seq && x.ragged; k++) {
        bk_sdpa_seq s = c.seq[k];
        s.q_row -= x.q_row, s.kv_row -= x.kv_row;
        layout.push_back(s);
    }
    return layout;
}

bool has_layout(const std::vector<bk_sdpa_seq> &layout, const bk_sdpa_call &c, const Extent &x)
{
    if (!x.ragged) return true;
    for (int k = 0; k < c.n_seq; k++) {
        const bk_sdpa_seq &s = c.seq[k], &l = layout[k];
        if (s.q_row - x.q_row != l.q_row || s.q_len != l.q_len || s.kv_row - x.kv_row != l.kv_row ||
            s.kv_len != l.kv_len)
            return false;
    }
    return true;
}

/* A built graph: what executing it takes. */
struct Plan {
    std::shared_ptr<Graph> graph;
    std::vector<int64_t> uids; /* of its operands, in the order execute takes them */
    int64_t workspace = 0;
};

/* The parts of a ragged call's device index, each padded to 16 bytes. */
enum { SEQ_LEN_Q_PART, SEQ_LEN_KV_PART, Q_OFFSETS_PART, KV_OFFSETS_PART, INDEX_PARTS };

struct Prepared {
    PlanKey key;
    std::vector<bk_sdpa_seq> layout;
    Plan plan; /* shared by the calls of one key */
    int32_t *index = nullptr;
    int64_t index_stride = 0; /* int32s from one part to the next */
};

/* Every call prepared, for the life of the process: never destroyed, as a
 * plan's destructor would call cuDNN while the process exits, perhaps after
 * the CUDA runtime has gone. */
std::mutex g_table_lock;
std::vector<const Prepared *> &g_table = *new std::vector<const Prepared *>;

/* The call of key whose sequences lie as c's (any layout when c is NULL),
 * under g_table_lock. */
const Prepared *find_locked(const PlanKey &key, const bk_sdpa_call *c, const Extent &x)
{
    for (const Prepared *p : g_table)
        if (p->key == key && (!c || has_layout(p->layout, *c, x))) return p;
    return nullptr;
}

/* plan: c's graph in one direction built for the current device, cuDNN's
 * heuristics choosing the engine. */
bk_status build_plan(cudnnHandle_t handle, const bk_sdpa_call &c, int backward,
                     const std::string &what, Plan *plan)
{
    plan->graph = make_graph(c, backward, 0);
    if (!plan->graph)
        return failed(BK_ERR_ARG, "bk_sdpa_prepare", what + ": not a call sdpa_graph.h describes");
    fe::error_t e = plan->graph->build(handle, {fe::HeurMode_t::A});
    if (e.is_bad())
        return failed(device_side(e) ? BK_ERR_DEVICE : BK_ERR_UNSUPPORTED, "bk_sdpa_prepare",
                      what + ": " + e.err_msg);
    plan->workspace = plan->graph->get_workspace_size();
    plan->uids = plan->graph->get_variant_pack_uids_sorted();
    if (plan->uids.size() > MAX_OPERANDS)
        return failed(BK_ERR_UNSUPPORTED, "bk_sdpa_prepare",
                      what + ": more operands than expected");
    return BK_OK;
}

/* p->index: the device copy of a ragged call's sequence lengths and ragged
 * offsets as kernels/sdpa_graph.c describes them (elements from the lowest
 * row of each side, n + 1 of them), in the int32 cuDNN's index tensors take
 * (call_problem has checked they fit). */
bk_status upload_index(const bk_sdpa_call &c, Prepared *p)
{
    bk_sdpa_graph d;
    if (bk_sdpa_describe(&c, &d) != 0)
        return failed(BK_ERR_ARG, "bk_sdpa_prepare", "not a call sdpa_graph.h describes");
    int64_t n = c.n_seq, stride = (n + 1 + 3) / 4 * 4;
    std::vector<int32_t> host(INDEX_PARTS * stride, 0);
    for (int64_t k = 0; k <= n; k++) {
        if (k < n) host[SEQ_LEN_Q_PART * stride + k] = (int32_t)d.seq_len_q[k];
        if (k < n) host[SEQ_LEN_KV_PART * stride + k] = (int32_t)d.seq_len_kv[k];
        host[Q_OFFSETS_PART * stride + k] = (int32_t)d.q.ragged_offset[k];
        host[KV_OFFSETS_PART * stride + k] = (int32_t)d.k.ragged_offset[k];
    }
    size_t bytes = host.size() * sizeof host[0];
    cudaError_t e = cudaMalloc(reinterpret_cast<void **>(&p->index), bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return bk_out_of_memory(bytes, "the sequence offsets of a cuDNN attention call");
    }
    if (e != cudaSuccess) return cuda_failed("cudaMalloc", e);
    p->index_stride = stride;
    e = cudaMemcpy(p->index, host.data(), bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) return BK_OK;
    (void)cudaFree(p->index);
    return cuda_failed("cudaMemcpy", e);
}

/* The plan of call c in one direction on device, made unless it was (under
 * g_table_lock); *workspace: what it needs. */
bk_status prepare_one(cudnnHandle_t handle, int device, const bk_sdpa_call &c, int backward,
                      const std::string &what, int64_t *workspace)
{
    Extent x = extent_of(c);
    PlanKey key = key_of(device, backward, c, x);
    const Prepared *found = find_locked(key, &c, x);
    if (!found) {
        std::unique_ptr<Prepared> p(new Prepared);
        p->key = key;
        p->layout = layout_of(c, x);
        const Prepared *same_key = find_locked(key, nullptr, x);
        bk_status st = BK_OK;
        if (same_key)
            p->plan = same_key->plan;
        else
            st = build_plan(handle, c, backward, what, &p->plan);
        if (st == BK_OK && x.ragged) st = upload_index(c, p.get());
        if (st != BK_OK) return st;
        g_table.push_back(p.get());
        found = p.release();
    }
    *workspace = found->plan.workspace;
    return BK_OK;
}

/* ------------------------------------------------------------------ handles */

/* One cuDNN handle per device for the life of the process; lock is held by
 * whoever sets its stream and queues work with it. */
struct DeviceHandle {
    std::mutex lock;
    cudnnHandle_t handle = nullptr;
};
DeviceHandle g_handles[MAX_DEVICES];

bk_status current_device(int *device)
{
    cudaError_t e = cudaGetDevice(device);
    if (e != cudaSuccess) return cuda_failed("cudaGetDevice", e);
    if (*device < 0 || *device >= MAX_DEVICES)
        return failed(BK_ERR_DEVICE, "cudaGetDevice", "device index past 64");
    return BK_OK;
}

/* The handle of device, made on first use (by bk_sdpa_prepare). */
bk_status handle_of(int device, cudnnHandle_t *handle)
{
    DeviceHandle &h = g_handles[device];
    std::lock_guard<std::mutex> guard(h.lock);
    if (!h.handle) {
        cudnnStatus_t s = fe::detail::create_handle(&h.handle);
        if (s != CUDNN_STATUS_SUCCESS) {
            h.handle = nullptr;
            return failed(BK_ERR_DEVICE, "cudnnCreate", fe::detail::get_error_string(s));
        }
    }
    *handle = h.handle;
    return BK_OK;
}

bk_status prepare_calls(const bk_sdpa_call *calls, int n, int backward, size_t *workspace_bytes)
{
    std::string why = availability_problem();
    if (!why.empty()) return failed(BK_ERR_UNSUPPORTED, "bk_sdpa_prepare", why);
    int device = 0;
    cudnnHandle_t handle = nullptr;
    bk_status st = current_device(&device);
    if (st == BK_OK) st = handle_of(device, &handle);
    int64_t most = 0;
    std::lock_guard<std::mutex> guard(g_table_lock);
    for (int i = 0; i < n && st == BK_OK; i++) {
        why = call_problem(&calls[i]);
        if (!why.empty())
            return failed(BK_ERR_ARG, "bk_sdpa_prepare", "call " + std::to_string(i) + ": " + why);
        for (int dir = 0; dir <= (backward ? 1 : 0) && st == BK_OK; dir++) {
            int64_t need = 0;
            std::string what = "call " + std::to_string(i) + (dir ? " backward" : " forward");
            st = prepare_one(handle, device, calls[i], dir, what, &need);
            most = std::max(most, need);
        }
    }
    if (st == BK_OK) *workspace_bytes = static_cast<size_t>(most);
    return st;
}

/* ------------------------------------------------------------------ execution */

/* A call's buffers by uid (Q_UID .. STATS_UID), as the caller passed them. */
struct Buffers {
    const void *at[STATS_UID + 1] = {};
};

/* Buffer uid where its tensor starts: base elements in (kernels/sdpa_graph.c:
 * the lowest row of its side; Stats whole). */
void *tensor_start(const Buffers &b, const bk_sdpa_graph &d, int64_t uid)
{
    void *buffer = const_cast<void *>(b.at[uid]);
    if (uid == STATS_UID) return static_cast<float *>(buffer) + d.stats.base;
    const bk_sdpa_tensor &t = on_query_side(uid) ? d.q : d.k;
    return static_cast<uint16_t *>(buffer) + t.base;
}

void *index_part(const Prepared &p, int part)
{
    return p.index + part * p.index_stride;
}

/* What the variant pack holds for uid: a buffer's start, or a part of the
 * device index; NULL for a uid we never made. */
void *operand(const Buffers &b, const bk_sdpa_graph &d, const Prepared &p, int64_t uid)
{
    if (uid >= Q_UID && uid <= STATS_UID) return b.at[uid] ? tensor_start(b, d, uid) : nullptr;
    if (uid == SEQ_LEN_Q_UID) return index_part(p, SEQ_LEN_Q_PART);
    if (uid == SEQ_LEN_KV_UID) return index_part(p, SEQ_LEN_KV_PART);
    if (uid > OFFSETS_UID && uid < OFFSETS_UID + STATS_UID)
        return index_part(p, on_query_side(uid - OFFSETS_UID) ? Q_OFFSETS_PART : KV_OFFSETS_PART);
    return nullptr;
}

/* The plan bk_sdpa_prepare made for c in one direction on the current
 * device, if the workspace given is enough for it. */
bk_status prepared_for(const bk_sdpa_call *c, int backward, size_t workspace_bytes,
                       const char *call, const Prepared **out)
{
    std::string why = call_problem(c);
    if (!why.empty()) return failed(BK_ERR_ARG, call, why);
    int device = 0;
    bk_status st = current_device(&device);
    if (st != BK_OK) return st;
    Extent x = extent_of(*c);
    {
        std::lock_guard<std::mutex> guard(g_table_lock);
        *out = find_locked(key_of(device, backward, *c, x), c, x);
    }
    if (!*out) return failed(BK_ERR_ARG, call, "the call was not prepared (bk_sdpa_prepare)");
    if ((int64_t)workspace_bytes < (*out)->plan.workspace)
        return failed(BK_ERR_ARG, call,
                      "a workspace of " + std::to_string(workspace_bytes) +
                          " bytes; the call needs " + std::to_string((*out)->plan.workspace));
    return BK_OK;
}

/* Queues plan p on q's stream with the variant pack's pointers[n]. */
bk_status run(const bk_queue *q, const Prepared &p, void **pointers, int n, void *workspace,
              const char *call)
{
    DeviceHandle &h = g_handles[p.key.device];
    std::lock_guard<std::mutex> guard(h.lock);
    cudnnStatus_t s = fe::detail::set_stream(h.handle, static_cast<cudaStream_t>(q->stream));
    if (s != CUDNN_STATUS_SUCCESS)
        return failed(BK_ERR_DEVICE, "cudnnSetStream", fe::detail::get_error_string(s));
    fe::error_t e = p.plan.graph->execute(h.handle, pointers, n, workspace);
    return e.is_good() ? BK_OK : failed(BK_ERR_DEVICE, call, e.err_msg);
}

/* Call c, prepared, in one direction on q's stream over buffers b. */
bk_status run_call(const bk_queue *q, const bk_sdpa_call *c, int backward, const Buffers &b,
                   void *workspace, size_t workspace_bytes)
{
    const char *call = backward ? "bk_sdpa_bwd" : "bk_sdpa_fwd";
    const Prepared *p = nullptr;
    bk_status st = prepared_for(c, backward, workspace_bytes, call, &p);
    if (st != BK_OK) return st;
    bk_sdpa_graph d;
    if (bk_sdpa_describe(c, &d) != 0) return failed(BK_ERR_ARG, call, "not a call sdpa_graph.h describes");
    void *pointers[MAX_OPERANDS];
    int n = static_cast<int>(p->plan.uids.size());
    for (int i = 0; i < n; i++)
        if (!(pointers[i] = operand(b, d, *p, p->plan.uids[i])))
            return failed(BK_ERR_DEVICE, call,
                          "the graph takes a tensor of unknown uid " +
                              std::to_string(p->plan.uids[i]));
    return run(q, *p, pointers, n, workspace,
               backward ? "cuDNN SDPA backward" : "cuDNN SDPA forward");
}

/* ------------------------------------------------------------------ the frontend's own check */

/* 0, -1 or -2 as bk_cudnn_sdpa_validate says, why with it. */
int validate_graphs(const bk_sdpa_call *c, int backward, int sm, std::string &why)
{
    why = load_cudnn();
    if (!why.empty()) return -2;
    why = call_problem(c);
    if (!why.empty()) return -1;
    for (int dir = 0; dir <= (backward ? 1 : 0); dir++) {
        std::shared_ptr<Graph> g = make_graph(*c, dir, sm);
        if (!g) {
            why = "not a call sdpa_graph.h describes";
            return -1;
        }
        fe::error_t e = g->validate();
        if (e.is_bad()) {
            why = std::string(dir ? "backward: " : "forward: ") + e.err_msg;
            return device_side(e) ? -2 : -1;
        }
    }
    return 0;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" int bk_cudnn_sdpa_available(char *why, size_t why_len)
{
    std::string reason;
    try {
        reason = availability_problem();
    } catch (const std::exception &e) {
        reason = e.what();
    }
    put_why(why, why_len, reason);
    return reason.empty();
}

extern "C" long bk_cudnn_sdpa_version(void)
{
    return loaded_version();
}

extern "C" bk_status bk_cudnn_sdpa_prepare(const bk_sdpa_call *calls, int n, int backward,
                                           size_t *workspace_bytes)
{
    BK_CHECK_ARG(n >= 0 && (n == 0 || calls) && workspace_bytes);
    return guarded("bk_sdpa_prepare",
                   [&] { return prepare_calls(calls, n, backward, workspace_bytes); });
}

extern "C" bk_status bk_cudnn_sdpa_fwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                                       const uint16_t *K, const uint16_t *V, uint16_t *O_blk,
                                       float *stats, void *workspace, size_t workspace_bytes)
{
    BK_CHECK_ARG(q && q->where == BK_DEVICE && c && Q && K && V && O_blk && stats);
    Buffers b;
    b.at[Q_UID] = Q, b.at[K_UID] = K, b.at[V_UID] = V, b.at[O_UID] = O_blk, b.at[STATS_UID] = stats;
    return guarded("bk_sdpa_fwd", [&] { return run_call(q, c, 0, b, workspace, workspace_bytes); });
}

extern "C" bk_status bk_cudnn_sdpa_bwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                                       const uint16_t *K, const uint16_t *V, const uint16_t *O,
                                       const uint16_t *dO, const float *stats, uint16_t *dQ,
                                       uint16_t *dK, uint16_t *dV, void *workspace,
                                       size_t workspace_bytes)
{
    BK_CHECK_ARG(q && q->where == BK_DEVICE && c && Q && K && V && O && dO && stats && dQ && dK &&
                 dV);
    Buffers b;
    b.at[Q_UID] = Q, b.at[K_UID] = K, b.at[V_UID] = V, b.at[O_UID] = O, b.at[DO_UID] = dO;
    b.at[DQ_UID] = dQ, b.at[DK_UID] = dK, b.at[DV_UID] = dV, b.at[STATS_UID] = stats;
    return guarded("bk_sdpa_bwd", [&] { return run_call(q, c, 1, b, workspace, workspace_bytes); });
}

extern "C" int bk_cudnn_sdpa_validate(const bk_sdpa_call *c, int backward, int sm, char *why,
                                      size_t why_len)
{
    std::string reason;
    int verdict = -2;
    try {
        verdict = validate_graphs(c, backward, sm, reason);
    } catch (const std::exception &e) {
        reason = e.what();
    }
    put_why(why, why_len, reason);
    return verdict;
}
