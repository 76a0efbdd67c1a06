/* Bad input from C: every call below must fail with the stated errno, never crash.
 * Built against Debian's <infiniband/verbs.h> and run on the drop-in by tests/bad_input.rs.
 * Prints "bad input: all N checks passed" and exits 0, or names the first failed check. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int checks;

#define EXPECT(what, cond)                                                     \
    do {                                                                       \
        checks++;                                                              \
        if (!(cond)) {                                                         \
            fprintf(stderr, "FAILED: %s (errno %d)\n", what, errno);           \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

int main(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    EXPECT("device list", list && n >= 1);

    errno = 0;
    EXPECT("open NULL device", ibv_open_device(NULL) == NULL && errno == EINVAL);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    EXPECT("open device", ctx != NULL);

    struct ibv_port_attr port;
    EXPECT("query port 2", ibv_query_port(ctx, 2, &port) != 0);
    EXPECT("query port 1", ibv_query_port(ctx, 1, &port) == 0 && port.state == IBV_PORT_ACTIVE);

    struct ibv_query_device_ex_input in = {.comp_mask = 1};
    struct ibv_device_attr_ex attr_ex;
    EXPECT("query_device_ex with unknown comp_mask",
           ibv_query_device_ex(ctx, &in, &attr_ex) == EINVAL);
    in.comp_mask = 0;
    EXPECT("query_device_ex", ibv_query_device_ex(ctx, &in, &attr_ex) == 0 &&
                                  attr_ex.orig_attr.phys_port_cnt == 1);

    struct ibv_gid_entry entry;
    EXPECT("query_gid_ex with a short entry",
           _ibv_query_gid_ex(ctx, 1, 1, &entry, 0, 4) == EINVAL);
    EXPECT("query_gid_ex with flags", _ibv_query_gid_ex(ctx, 1, 1, &entry, 1, sizeof(entry)) == EINVAL);
    EXPECT("query_gid_ex beyond the table",
           _ibv_query_gid_ex(ctx, 1, 1000, &entry, 0, sizeof(entry)) == ENODATA);
    EXPECT("query_gid_ex NULL entry", _ibv_query_gid_ex(ctx, 1, 1, NULL, 0, sizeof(entry)) == EINVAL);

    errno = 0;
    EXPECT("alloc_pd on NULL", ibv_alloc_pd(NULL) == NULL && errno == EINVAL);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    EXPECT("alloc_pd", pd != NULL);

    char *buf = calloc(1, 4096);
    errno = 0;
    EXPECT("reg_mr of NULL", ibv_reg_mr(pd, NULL, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL &&
                                 errno == EINVAL);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    EXPECT("reg_mr", mr != NULL);

    errno = 0;
    EXPECT("create_cq with cqe < 0", ibv_create_cq(ctx, -1, NULL, NULL, 0) == NULL &&
                                         errno == EINVAL);
    errno = 0;
    EXPECT("create_cq with a bad comp_vector",
           ibv_create_cq(ctx, 16, NULL, NULL, 7) == NULL && errno == EINVAL);
    struct ibv_cq_init_attr_ex cq_attr = {.cqe = 16, .comp_mask = 1u << 7};
    errno = 0;
    EXPECT("create_cq_ex with an unknown comp_mask bit",
           ibv_create_cq_ex(ctx, &cq_attr) == NULL && errno == EINVAL);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    EXPECT("create_cq", cq != NULL);

    errno = 0;
    EXPECT("create_qp with NULL attributes", ibv_create_qp(pd, NULL) == NULL && errno == EINVAL);
    struct ibv_qp_init_attr qpa = {.send_cq = NULL, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                   .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                           .max_send_sge = 1, .max_recv_sge = 1}};
    errno = 0;
    EXPECT("create_qp with a NULL CQ", ibv_create_qp(pd, &qpa) == NULL && errno == EINVAL);
    struct ibv_qp_init_attr_ex qpx = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                      .cap = qpa.cap, .comp_mask = 0};
    errno = 0;
    EXPECT("create_qp_ex without a PD", ibv_create_qp_ex(ctx, &qpx) == NULL && errno == EINVAL);
    qpa.send_cq = cq;
    struct ibv_qp *qp = ibv_create_qp(pd, &qpa);
    EXPECT("create_qp", qp != NULL);
    EXPECT("modify_qp with NULL attributes", ibv_modify_qp(qp, NULL, IBV_QP_STATE) == EINVAL);

    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = -1, .opcode = IBV_WR_SEND};
    struct ibv_send_wr *bad = NULL;
    EXPECT("post_send with num_sge -1", ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr);
    wr.num_sge = 1;
    wr.opcode = 99;
    bad = NULL;
    EXPECT("post_send with an unknown opcode", ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr);

    struct ibv_wc wc;
    EXPECT("poll_cq with a negative count", ibv_poll_cq(cq, -1, &wc) < 0);
    EXPECT("poll_cq", ibv_poll_cq(cq, 1, &wc) == 0);

    void *cq_ctx;
    struct ibv_cq *ev_cq;
    errno = 0;
    EXPECT("get_cq_event on NULL", ibv_get_cq_event(NULL, &ev_cq, &cq_ctx) == -1 && errno == EINVAL);

    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    EXPECT("create_comp_channel", ch != NULL && ch->fd >= 0);
    EXPECT("destroy_comp_channel", ibv_destroy_comp_channel(ch) == 0);
    EXPECT("destroy_comp_channel twice", ibv_destroy_comp_channel(ch) == EINVAL);

    EXPECT("dealloc_pd in use", ibv_dealloc_pd(pd) == EBUSY);
    EXPECT("destroy_cq in use", ibv_destroy_cq(cq) == EBUSY);
    EXPECT("destroy_qp", ibv_destroy_qp(qp) == 0);
    EXPECT("destroy_qp twice", ibv_destroy_qp(qp) == EINVAL);
    EXPECT("modify_qp of a destroyed QP", ibv_modify_qp(qp, &(struct ibv_qp_attr){0}, 0) == EINVAL);
    EXPECT("destroy_cq", ibv_destroy_cq(cq) == 0);
    EXPECT("destroy_cq twice", ibv_destroy_cq(cq) == EINVAL);
    EXPECT("dereg_mr", ibv_dereg_mr(mr) == 0);
    EXPECT("dereg_mr twice", ibv_dereg_mr(mr) == EINVAL);
    EXPECT("rereg_mr of a destroyed MR", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) != 0);
    EXPECT("dealloc_pd", ibv_dealloc_pd(pd) == 0);
    EXPECT("dealloc_pd twice", ibv_dealloc_pd(pd) == EINVAL);
    EXPECT("attach_mcast of a NULL QP", ibv_attach_mcast(NULL, NULL, 0) == EINVAL);
    EXPECT("detach_mcast of a NULL QP", ibv_detach_mcast(NULL, NULL, 0) == EINVAL);
    errno = 0;
    EXPECT("unsupported verb: open_xrcd", ibv_open_xrcd(ctx, NULL) == NULL && errno == EOPNOTSUPP);
    errno = 0;
    EXPECT("unsupported verb: import_device", ibv_import_device(3) == NULL && errno == EOPNOTSUPP);
    EXPECT("close_device", ibv_close_device(ctx) == 0);
    EXPECT("close_device twice", ibv_close_device(ctx) == EINVAL);
    ibv_free_device_list(list);
    free(buf);
    printf("bad input: all %d checks passed\n", checks);
    return 0;
}
