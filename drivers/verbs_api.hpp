// The libibverbs calls the verbs backend (verbs.hpp) makes, behind one interface, so the backend can
// run against a test double (tests/support/fake_verbs.hpp) on machines without an RDMA device.
// RealVerbs forwards each call to the ibv_* function of the same name; return values and error
// conventions are libibverbs' own (NULL or -1 with errno, or an errno value, as each call documents).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

namespace fedgate {

class VerbsApi {
public:
    virtual ~VerbsApi() = default;

    virtual ibv_device** get_device_list(int* num_devices) = 0;
    virtual void free_device_list(ibv_device** list) = 0;
    virtual const char* get_device_name(ibv_device* device) = 0;
    virtual ibv_context* open_device(ibv_device* device) = 0;
    virtual int close_device(ibv_context* context) = 0;

    virtual int query_device(ibv_context* context, ibv_device_attr* attr) = 0;
    virtual int query_port(ibv_context* context, uint8_t port, ibv_port_attr* attr) = 0;
    // Every valid GID of every port; returns how many were written or a negative errno.
    virtual ssize_t query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries) = 0;

    virtual ibv_pd* alloc_pd(ibv_context* context) = 0;
    virtual int dealloc_pd(ibv_pd* pd) = 0;
    virtual ibv_cq* create_cq(ibv_context* context, int cqe) = 0;
    virtual int destroy_cq(ibv_cq* cq) = 0;
    virtual ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) = 0;
    virtual int destroy_qp(ibv_qp* qp) = 0;
    virtual int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) = 0;
    virtual ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, int access) = 0;
    virtual int dereg_mr(ibv_mr* mr) = 0;

    virtual int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) = 0;
    virtual int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) = 0;
    virtual int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) = 0;
};

// The process-wide RealVerbs (stateless).
VerbsApi& real_verbs();

}  // namespace fedgate
