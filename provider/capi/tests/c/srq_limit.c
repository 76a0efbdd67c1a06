/* SRQ limit events and completion channels from C, on the drop-in: two emulated devices in
 * one process, an RC QP pair, the receiver on an SRQ armed with a limit. Sending drops the
 * SRQ below its limit: ibv_get_async_event must report IBV_EVENT_SRQ_LIMIT_REACHED for that
 * SRQ (on the context's real async_fd, seen readable by poll(2)), the limit must read 0
 * afterwards, and every message must arrive intact through the completion channel. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "rc_connect.h"

#define FAIL(...) do { fprintf(stderr, "FAILED: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)
#define MSGS 8
#define SIZE 256

struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_srq *srq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    char *buf;
    union ibv_gid gid;
};

static void open_side(struct side *s, struct ibv_device *dev, int with_srq)
{
    s->ctx = ibv_open_device(dev);
    if (!s->ctx) FAIL("open");
    s->pd = ibv_alloc_pd(s->ctx);
    s->ch = ibv_create_comp_channel(s->ctx);
    s->cq = ibv_create_cq(s->ctx, 64, s, s->ch, 0);
    s->buf = calloc(MSGS, SIZE);
    s->mr = ibv_reg_mr(s->pd, s->buf, MSGS * SIZE, IBV_ACCESS_LOCAL_WRITE);
    if (!s->pd || !s->ch || !s->cq || !s->mr) FAIL("resources");
    if (with_srq) {
        struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
        s->srq = ibv_create_srq(s->pd, &sa);
        if (!s->srq) FAIL("create_srq");
    }
    struct ibv_qp_init_attr qa = {.send_cq = s->cq, .recv_cq = s->cq, .srq = s->srq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 16, .max_recv_wr = 16,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    s->qp = ibv_create_qp(s->pd, &qa);
    if (!s->qp) FAIL("create_qp");
    if (ibv_query_gid(s->ctx, 1, 1, &s->gid)) FAIL("query_gid");
}

static void connect_qp(struct side *s, struct side *peer)
{
    if (rc_connect(s->qp, peer->qp->qp_num, &peer->gid, 0, 100)) FAIL("connect");
}

/* Waits on the channel for one event of s->cq, then takes `want` completions. */
static void take(struct side *s, int want, struct ibv_wc *out)
{
    int got = 0;
    while (got < want) {
        int n = ibv_poll_cq(s->cq, want - got, out + got);
        if (n < 0) FAIL("poll_cq");
        got += n;
        if (got == want) break;
        if (ibv_req_notify_cq(s->cq, 0)) FAIL("req_notify");
        n = ibv_poll_cq(s->cq, want - got, out + got);
        if (n < 0) FAIL("poll_cq");
        got += n;
        if (got == want) break;
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        if (ibv_get_cq_event(s->ch, &ev_cq, &ev_ctx)) FAIL("get_cq_event");
        if (ev_cq != s->cq || ev_ctx != s) FAIL("cq event names another CQ");
        ibv_ack_cq_events(ev_cq, 1);
    }
}

int main(void)
{
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 2) FAIL("two devices");
    struct side tx = {0}, rx = {0};
    open_side(&tx, list[0], 0);
    open_side(&rx, list[1], 1);
    connect_qp(&tx, &rx);
    connect_qp(&rx, &tx);

    for (int i = 0; i < MSGS; i++) {
        struct ibv_sge sge = {.addr = (uintptr_t)(rx.buf + i * SIZE), .length = SIZE,
                              .lkey = rx.mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1}, *bad;
        if (ibv_post_srq_recv(rx.srq, &wr, &bad)) FAIL("post_srq_recv");
    }
    struct ibv_srq_attr limit = {.srq_limit = MSGS / 2};
    if (ibv_modify_srq(rx.srq, &limit, IBV_SRQ_LIMIT)) FAIL("arm the limit");

    for (int i = 0; i < MSGS; i++) {
        memset(tx.buf + i * SIZE, 'a' + i, SIZE);
        struct ibv_sge sge = {.addr = (uintptr_t)(tx.buf + i * SIZE), .length = SIZE,
                              .lkey = tx.mr->lkey};
        struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1,
                                 .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
                                 .imm_data = htobe32(0x5000 + i)}, *bad;
        if (ibv_post_send(tx.qp, &wr, &bad)) FAIL("post_send");
    }
    struct ibv_wc wc[MSGS];
    take(&tx, MSGS, wc);
    for (int i = 0; i < MSGS; i++)
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != (uint64_t)i) FAIL("send completion %d", i);
    take(&rx, MSGS, wc);
    for (int i = 0; i < MSGS; i++) {
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV ||
            wc[i].byte_len != SIZE || !(wc[i].wc_flags & IBV_WC_WITH_IMM) ||
            be32toh(wc[i].imm_data) != 0x5000u + (unsigned)(wc[i].wr_id - 1000))
            FAIL("receive completion %d", i);
        const char *p = rx.buf + (wc[i].wr_id - 1000) * SIZE;
        for (int b = 0; b < SIZE; b++)
            if (p[b] != 'a' + (int)(wc[i].wr_id - 1000)) FAIL("byte %d of message %d", b, i);
    }

    struct pollfd pfd = {.fd = rx.ctx->async_fd, .events = POLLIN};
    if (poll(&pfd, 1, 5000) != 1) FAIL("async_fd never became readable");
    struct ibv_async_event ev;
    if (ibv_get_async_event(rx.ctx, &ev)) FAIL("get_async_event");
    if (ev.event_type != IBV_EVENT_SRQ_LIMIT_REACHED || ev.element.srq != rx.srq)
        FAIL("event %d (%s)", ev.event_type, ibv_event_type_str(ev.event_type));
    ibv_ack_async_event(&ev);
    struct ibv_srq_attr now;
    if (ibv_query_srq(rx.srq, &now) || now.srq_limit != 0) FAIL("the limit did not disarm");

    struct side *sides[2] = {&tx, &rx};
    for (int i = 0; i < 2; i++) {
        struct side *s = sides[i];
        if (ibv_destroy_qp(s->qp) || (s->srq && ibv_destroy_srq(s->srq)) ||
            ibv_destroy_cq(s->cq) || ibv_destroy_comp_channel(s->ch) ||
            ibv_dereg_mr(s->mr) || ibv_dealloc_pd(s->pd) || ibv_close_device(s->ctx))
            FAIL("teardown");
        free(s->buf);
    }
    ibv_free_device_list(list);
    printf("srq limit: %d messages verified, limit event received\n", MSGS);
    return 0;
}
