/* UD multicast from C, on the drop-in: ibv_attach_mcast / ibv_detach_mcast between the two
 * emulated devices of one process. A sender on device 0 sends to group 239.22.33.1 (AH to
 * its IPv4-mapped GID, remote QPN 0xFFFFFF); two UD QPs on device 1 and one on device 0,
 * all attached, must each receive every byte; a detached QP must receive nothing more;
 * ibv_destroy_qp of an attached QP fails with EBUSY (as the kernel's); the bad inputs get
 * EINVAL. Argument: none. Prints "checks passed". */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define FAIL(...) do { fprintf(stderr, "FAILED: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)
#define QKEY 0x01234567u
#define SIZE 512
#define GRH 40

static int checks;
#define EXPECT(what, cond) do { if (!(cond)) FAIL("%s", what); checks++; } while (0)

struct member {
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    char *buf;
};

static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type)
{
    struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = type,
                                  .cap = {.max_send_wr = 8, .max_recv_wr = 8,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    return ibv_create_qp(pd, &qa);
}

static void make_member(struct member *m, struct ibv_context *ctx)
{
    m->pd = ibv_alloc_pd(ctx);
    m->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    m->buf = calloc(1, 2 * (SIZE + GRH));
    m->mr = ibv_reg_mr(m->pd, m->buf, 2 * (SIZE + GRH), IBV_ACCESS_LOCAL_WRITE);
    if (!m->pd || !m->cq || !m->buf || !m->mr) FAIL("resources");
    m->qp = ud_qp(m->pd, m->cq, IBV_QPT_UD);
    if (!m->qp) FAIL("create_qp");
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                            .qkey = QKEY};
    if (ibv_modify_qp(m->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
        FAIL("to INIT");
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(m->qp, &a, IBV_QP_STATE)) FAIL("to RTR");
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    if (ibv_modify_qp(m->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) FAIL("to RTS");
}

static void post_recv(struct member *m)
{
    struct ibv_sge sge = {.addr = (uintptr_t)m->buf, .length = SIZE + GRH, .lkey = m->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(m->qp, &wr, &bad)) FAIL("post_recv");
}

/* Polls `cq` for one completion for up to `ms` milliseconds; 1 if one came. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0) FAIL("poll_cq");
        if (n == 1) return 1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > ms)
            return 0;
    }
}

static void send_to_group(struct member *s, struct ibv_ah *ah, char fill)
{
    char *msg = s->buf + SIZE + GRH;
    memset(msg, fill, SIZE);
    struct ibv_sge sge = {.addr = (uintptr_t)msg, .length = SIZE, .lkey = s->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED}, *bad;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = 0xffffff;
    wr.wr.ud.remote_qkey = QKEY;
    if (ibv_post_send(s->qp, &wr, &bad)) FAIL("post_send");
    struct ibv_wc wc;
    if (!poll_one(s->cq, &wc, 10000) || wc.status != IBV_WC_SUCCESS) FAIL("send completion");
}

static void expect_message(struct member *m, const char *who, char fill, uint32_t src_qp)
{
    struct ibv_wc wc;
    if (!poll_one(m->cq, &wc, 10000)) FAIL("%s: no receive completion", who);
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV) FAIL("%s: status %d", who, wc.status);
    if (wc.byte_len != SIZE + GRH) FAIL("%s: byte_len %u", who, wc.byte_len);
    if (wc.src_qp != src_qp || wc.qp_num != m->qp->qp_num) FAIL("%s: QPNs", who);
    if (!(wc.wc_flags & IBV_WC_GRH)) FAIL("%s: no GRH flag", who);
    for (int i = 0; i < SIZE; i++)
        if (m->buf[GRH + i] != fill) FAIL("%s: byte %d is %d", who, i, m->buf[GRH + i]);
    /* The IPv4 header in the GRH area: destination the group. */
    const unsigned char *ip = (const unsigned char *)m->buf + 20;
    if (ip[16] != 239 || ip[17] != 22 || ip[18] != 33 || ip[19] != 1) FAIL("%s: IP destination", who);
    checks++;
}

int main(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 2) FAIL("two devices");
    struct ibv_context *c0 = ibv_open_device(list[0]), *c1 = ibv_open_device(list[1]);
    if (!c0 || !c1) FAIL("open");

    struct ibv_device_attr attr;
    if (ibv_query_device(c1, &attr)) FAIL("query_device");
    EXPECT("max_mcast_grp > 0", attr.max_mcast_grp > 0 && attr.max_mcast_qp_attach > 0);
    EXPECT("max_total_mcast_qp_attach", attr.max_total_mcast_qp_attach >= attr.max_mcast_qp_attach);

    union ibv_gid group = {.raw = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 22, 33, 1}};
    struct member sender, b1, b2, a1;
    make_member(&sender, c0);
    make_member(&b1, c1);
    make_member(&b2, c1);
    make_member(&a1, c0);
    struct member *members[] = {&b1, &b2, &a1};
    const char *names[] = {"b1", "b2", "a1"};
    for (int i = 0; i < 3; i++) {
        EXPECT("attach", ibv_attach_mcast(members[i]->qp, &group, 0) == 0);
        post_recv(members[i]);
    }
    EXPECT("attach twice", ibv_attach_mcast(b1.qp, &group, 0) == 0);

    struct ibv_ah_attr ah_attr = {.is_global = 1, .port_num = 1,
                                  .grh = {.dgid = group, .sgid_index = 1, .hop_limit = 1}};
    struct ibv_ah *ah = ibv_create_ah(sender.pd, &ah_attr);
    if (!ah) FAIL("create_ah to the group");
    send_to_group(&sender, ah, 'x');
    for (int i = 0; i < 3; i++)
        expect_message(members[i], names[i], 'x', sender.qp->qp_num);

    /* Attached: not destroyed (the kernel's EBUSY); detached: gone, and no more data. */
    EXPECT("destroy attached QP is EBUSY", ibv_destroy_qp(b2.qp) == EBUSY);
    EXPECT("detach", ibv_detach_mcast(b2.qp, &group, 0) == 0);
    EXPECT("detach again is EINVAL", ibv_detach_mcast(b2.qp, &group, 0) == EINVAL);
    post_recv(&b1);
    post_recv(&b2);
    post_recv(&a1);
    send_to_group(&sender, ah, 'y');
    expect_message(&b1, "b1 again", 'y', sender.qp->qp_num);
    expect_message(&a1, "a1 again", 'y', sender.qp->qp_num);
    struct ibv_wc wc;
    EXPECT("nothing for the detached QP", poll_one(b2.cq, &wc, 200) == 0);
    EXPECT("destroy detached QP", ibv_destroy_qp(b2.qp) == 0);

    /* Bad input. */
    union ibv_gid unicast = {.raw = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 22, 33, 2}};
    EXPECT("unicast GID is EINVAL", ibv_attach_mcast(b1.qp, &unicast, 0) == EINVAL);
    EXPECT("NULL GID is EINVAL", ibv_attach_mcast(b1.qp, NULL, 0) == EINVAL);
    struct ibv_qp *rc = ud_qp(b1.pd, b1.cq, IBV_QPT_RC);
    if (!rc) FAIL("create RC QP");
    EXPECT("RC QP is EINVAL", ibv_attach_mcast(rc, &group, 0) == EINVAL);
    EXPECT("destroy RC", ibv_destroy_qp(rc) == 0);
    EXPECT("destroyed QP is EINVAL", ibv_attach_mcast(rc, &group, 0) == EINVAL);

    EXPECT("detach b1", ibv_detach_mcast(b1.qp, &group, 0) == 0);
    EXPECT("detach a1", ibv_detach_mcast(a1.qp, &group, 0) == 0);
    EXPECT("destroy", ibv_destroy_qp(b1.qp) == 0 && ibv_destroy_qp(a1.qp) == 0);
    printf("%d checks passed\n", checks);
    return 0;
}
