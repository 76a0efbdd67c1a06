/* Two benchmarks in plain C through libibverbs, shaped as `softverbs perf ... --loopback`:
 * one process, the first two devices listed, RC, busy-polled CQs. They have no loop of
 * their own beyond post and poll, so that the drop-in's own cost can be told apart from
 * whatever perftest's loops add.
 *     verbs_bench send_lat ITERS  8-byte SENDs without inline data, a thread per side, every
 *                                 send signaled (perftest's latency default, -t 1, and so
 *                                 softverbs perf's); prints the median half round trip:
 *                                 "send_lat 8 B t_typical X.XX us (N round trips)"
 *     verbs_bench write_bw ITERS  64 KiB RDMA WRITEs, 128 in flight, one in 100 signaled
 *                                 (softverbs perf's -t 128 -Q 100): "write_bw 65536 B X MB/s"
 * Build: cc -O2 -o verbs_bench verbs_bench.c -libverbs -lpthread */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIZE 8
#define DEPTH 128
#define SIGNAL_EVERY 1
#define BW_SIZE 65536
#define BW_SIGNAL_EVERY 100

struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    union ibv_gid gid;
    char *buf;
};

static void die(const char *what) {
    fprintf(stderr, "sendlat: %s failed\n", what);
    exit(1);
}

static void open_side(struct side *s, struct ibv_device *dev) {
    s->ctx = ibv_open_device(dev);
    if (!s->ctx) die("ibv_open_device");
    s->pd = ibv_alloc_pd(s->ctx);
    s->buf = calloc(2, BW_SIZE);
    s->mr = s->pd && s->buf ? ibv_reg_mr(s->pd, s->buf, 2 * BW_SIZE,
                                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
                            : NULL;
    s->cq = ibv_create_cq(s->ctx, 2 * DEPTH, NULL, NULL, 0);
    if (!s->mr || !s->cq) die("pd/mr/cq");
    struct ibv_qp_init_attr init = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH,
                                            .max_send_sge = 1, .max_recv_sge = 1}};
    s->qp = ibv_create_qp(s->pd, &init);
    if (!s->qp || ibv_query_gid(s->ctx, 1, 1, &s->gid)) die("qp/gid");
}

static void connect_to(struct side *s, struct side *peer) {
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("INIT");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = peer->qp->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer->gid;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("RTR");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        die("RTS");
}

static void post_recv(struct side *s) {
    struct ibv_sge sge = {(uintptr_t)s->buf + SIZE, SIZE, s->mr->lkey};
    struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(s->qp, &wr, &bad)) die("post_recv");
}

static void post_send(struct side *s, long n) {
    struct ibv_sge sge = {(uintptr_t)s->buf, SIZE, s->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = n, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = n % SIGNAL_EVERY == 0 ? IBV_SEND_SIGNALED : 0}, *bad;
    if (ibv_post_send(s->qp, &wr, &bad)) die("post_send");
}

/* Busy-polls until one receive completed (send completions are taken on the way). */
static void wait_recv(struct side *s) {
    struct ibv_wc wc[4];
    for (;;) {
        int n = ibv_poll_cq(s->cq, 4, wc);
        if (n < 0) die("poll_cq");
        int got = 0;
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) die("completion");
            if (wc[i].opcode == IBV_WC_RECV) got++;
        }
        if (got > 1) die("two receives at once");
        if (got) return;
    }
}

static long iters;
static struct side sides[2];

static void *server(void *arg) {
    (void)arg;
    for (long i = 0; i < iters; i++) {
        wait_recv(&sides[0]);
        post_recv(&sides[0]);
        post_send(&sides[0], i);
    }
    return NULL;
}

/* 64 KiB WRITEs from side 1 into side 0's buffer, DEPTH in flight; returns MB/s. */
static double write_bw(void) {
    struct side *s = &sides[1];
    struct ibv_sge sge = {(uintptr_t)s->buf, BW_SIZE, s->mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                             .wr.rdma = {(uintptr_t)sides[0].buf, sides[0].mr->rkey}}, *bad;
    struct ibv_wc wc[16];
    long posted = 0, done = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (done < iters) {
        while (posted < iters && posted - done < DEPTH) {
            wr.wr_id = posted;
            /* Signaled: one in BW_SIGNAL_EVERY and the last, each completing those before. */
            int last = posted == iters - 1;
            wr.send_flags = (posted + 1) % BW_SIGNAL_EVERY == 0 || last ? IBV_SEND_SIGNALED : 0;
            if (ibv_post_send(s->qp, &wr, &bad)) die("post_send");
            posted++;
        }
        int n = ibv_poll_cq(s->cq, 16, wc);
        if (n < 0) die("poll_cq");
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) die("completion");
            done = (long)wc[i].wr_id + 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    return (double)iters * BW_SIZE / secs / 1e6;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "send_lat") && strcmp(argv[1], "write_bw"))) {
        fprintf(stderr, "usage: verbs_bench send_lat|write_bw ITERS\n");
        return 2;
    }
    iters = atol(argv[2]);
    if (iters < 1) die("ITERS");
    int num;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 2) die("two devices");
    for (int i = 0; i < 2; i++) open_side(&sides[i], list[i]);
    connect_to(&sides[0], &sides[1]);
    connect_to(&sides[1], &sides[0]);
    if (!strcmp(argv[1], "write_bw")) {
        printf("write_bw %d B %.2f MB/s (%ld WRITEs)\n", BW_SIZE, write_bw(), iters);
        return 0;
    }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) post_recv(&sides[i]);
    pthread_t t;
    if (pthread_create(&t, NULL, server, NULL)) die("pthread_create");
    double *us = malloc(sizeof(double) * iters);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < iters; i++) {
        post_send(&sides[1], i);
        wait_recv(&sides[1]);
        post_recv(&sides[1]);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        us[i] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 2e3;
        t0 = t1;
    }
    pthread_join(t, NULL);
    qsort(us, iters, sizeof(double), by_value);
    printf("send_lat %d B t_typical %.2f us (%ld round trips)\n", SIZE, us[iters / 2], iters);
    return 0;
}
