// RealVerbs: VerbsApi straight onto libibverbs.
#include "drivers/verbs_api.hpp"

namespace fedgate {
namespace {

class RealVerbs final : public VerbsApi {
public:
    ibv_device** get_device_list(int* n) override { return ibv_get_device_list(n); }
    void free_device_list(ibv_device** list) override { ibv_free_device_list(list); }
    const char* get_device_name(ibv_device* d) override { return ibv_get_device_name(d); }
    ibv_context* open_device(ibv_device* d) override { return ibv_open_device(d); }
    int close_device(ibv_context* c) override { return ibv_close_device(c); }

    int query_device(ibv_context* c, ibv_device_attr* a) override { return ibv_query_device(c, a); }
    int query_port(ibv_context* c, uint8_t port, ibv_port_attr* a) override { return ibv_query_port(c, port, a); }
    ssize_t query_gid_table(ibv_context* c, ibv_gid_entry* e, size_t max) override {
        return ibv_query_gid_table(c, e, max, 0);
    }

    ibv_pd* alloc_pd(ibv_context* c) override { return ibv_alloc_pd(c); }
    int dealloc_pd(ibv_pd* pd) override { return ibv_dealloc_pd(pd); }
    ibv_cq* create_cq(ibv_context* c, int cqe) override { return ibv_create_cq(c, cqe, nullptr, nullptr, 0); }
    int destroy_cq(ibv_cq* cq) override { return ibv_destroy_cq(cq); }
    ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* a) override { return ibv_create_qp(pd, a); }
    int destroy_qp(ibv_qp* qp) override { return ibv_destroy_qp(qp); }
    int modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) override { return ibv_modify_qp(qp, a, mask); }
    ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t len, int access) override { return ibv_reg_mr(pd, addr, len, access); }
    int dereg_mr(ibv_mr* mr) override { return ibv_dereg_mr(mr); }

    int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) override { return ibv_post_send(qp, wr, bad); }
    int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) override { return ibv_post_recv(qp, wr, bad); }
    int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) override { return ibv_poll_cq(cq, n, wc); }
};

}  // namespace

VerbsApi& real_verbs() {
    static RealVerbs verbs;
    return verbs;
}

}  // namespace fedgate
