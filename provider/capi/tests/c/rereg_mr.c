/* ibv_rereg_mr from C, on the drop-in: two emulated devices in one process, an RC QP pair;
 * the receiver's MR is re-registered while the sender writes into it with RDMA.
 *  - bad input: the return code of ibv_rereg_mr(3) (IBV_REREG_MR_ERR_INPUT for what
 *    libibverbs rejects, IBV_REREG_MR_ERR_CMD for what the kernel rejects) and its errno,
 *    and the MR unchanged afterwards;
 *  - every re-registration keeps lkey and rkey (in place, as mlx5 and rxe do);
 *  - CHANGE_ACCESS grants remote write: an RDMA WRITE with the rkey lands;
 *  - a memory window bound to the MR makes a re-registration fail with EBUSY;
 *  - CHANGE_TRANSLATION moves the MR: RDMA WRITE and READ with the same rkey reach the new
 *    buffer only;
 *  - CHANGE_PD moves it to another PD (which then cannot be deallocated);
 *  - the old range is out of the rkey's reach after the moves (remote access error, the
 *    target bytes untouched).
 * Prints "rereg_mr: ... checks passed" and exits 0, or names the first failed check. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "rc_connect.h"

#define FAIL(...) do { fprintf(stderr, "FAILED: " __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } while (0)
#define SIZE 4096
#define MOVED 2048
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static int checks;
#define EXPECT(what, cond) do { checks++; if (!(cond)) FAIL("%s", what); } while (0)

struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    char *buf;
    union ibv_gid gid;
};

static void open_side(struct side *s, struct ibv_device *dev)
{
    s->ctx = ibv_open_device(dev);
    if (!s->ctx) FAIL("open");
    s->pd = ibv_alloc_pd(s->ctx);
    s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
    s->buf = calloc(1, SIZE);
    s->mr = ibv_reg_mr(s->pd, s->buf, SIZE, IBV_ACCESS_LOCAL_WRITE);
    if (!s->pd || !s->cq || !s->buf || !s->mr) FAIL("resources");
    struct ibv_qp_init_attr qa = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 16, .max_recv_wr = 16,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    s->qp = ibv_create_qp(s->pd, &qa);
    if (!s->qp) FAIL("create_qp");
    if (ibv_query_gid(s->ctx, 1, 1, &s->gid)) FAIL("query_gid");
}

static void connect_qp(struct side *s, struct side *peer)
{
    if (rc_connect(s->qp, peer->qp->qp_num, &peer->gid,
                   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 7))
        FAIL("connect");
}

/* One completion of `cq`, waiting at most 10 s. */
static struct ibv_wc one(struct ibv_cq *cq)
{
    struct ibv_wc wc;
    time_t end = time(NULL) + 10;
    for (;;) {
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) FAIL("poll_cq");
        if (n == 1) return wc;
        if (time(NULL) > end) FAIL("no completion within 10 s");
    }
}

/* An RDMA WRITE or READ of `len` bytes of tx's buffer to/from [addr, addr + len) under rkey;
 * returns the completion status. */
static enum ibv_wc_status rdma(struct side *tx, enum ibv_wr_opcode op, void *addr, uint32_t len,
                               uint32_t rkey)
{
    struct ibv_sge sge = {.addr = (uintptr_t)tx->buf, .length = len, .lkey = tx->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 42, .sg_list = &sge, .num_sge = 1, .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)addr, .rkey = rkey}}, *bad;
    if (ibv_post_send(tx->qp, &wr, &bad)) FAIL("post_send");
    struct ibv_wc wc = one(tx->cq);
    if (wc.wr_id != 42) FAIL("completion of another WR");
    return wc.status;
}

static int all(const char *p, char c, int n)
{
    for (int i = 0; i < n; i++)
        if (p[i] != c) return 0;
    return 1;
}

/* The MR's fields as they were. */
struct snapshot { void *addr; size_t length; uint32_t lkey, rkey; struct ibv_pd *pd; };
static struct snapshot snap(struct ibv_mr *mr)
{
    return (struct snapshot){mr->addr, mr->length, mr->lkey, mr->rkey, mr->pd};
}
static int same(struct ibv_mr *mr, struct snapshot s)
{
    return mr->addr == s.addr && mr->length == s.length && mr->lkey == s.lkey &&
           mr->rkey == s.rkey && mr->pd == s.pd;
}

/* A failed rereg: its return code, its errno, and the MR unchanged. */
#define REJECTED(what, call, code, err)                                                   \
    do {                                                                                  \
        struct snapshot before = snap(mr);                                                \
        errno = 0;                                                                        \
        int rc = (call);                                                                  \
        checks++;                                                                         \
        if (rc != (code) || errno != (err) || !same(mr, before))                          \
            FAIL("%s: returned %d, expected %d with errno %d", what, rc, code, err);      \
    } while (0)

int main(void)
{
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 2) FAIL("two devices");
    struct side tx = {0}, rx = {0};
    open_side(&tx, list[0]);
    open_side(&rx, list[1]);
    connect_qp(&tx, &rx);
    connect_qp(&rx, &tx);
    struct ibv_mr *mr = rx.mr;
    char *moved = calloc(1, SIZE);
    struct ibv_pd *other_pd = ibv_alloc_pd(tx.ctx); /* of the other context */
    if (!moved || !other_pd) FAIL("resources");

    /* Bad input. */
    REJECTED("unknown flag", ibv_rereg_mr(mr, 8, NULL, NULL, 0, 0), IBV_REREG_MR_ERR_INPUT, EINVAL);
    REJECTED("CHANGE_TRANSLATION to NULL",
             ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, SIZE, 0),
             IBV_REREG_MR_ERR_INPUT, EINVAL);
    REJECTED("CHANGE_TRANSLATION to zero length",
             ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, moved, 0, 0),
             IBV_REREG_MR_ERR_INPUT, EINVAL);
    REJECTED("access without CHANGE_ACCESS",
             ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, rx.pd, NULL, 0, RW), IBV_REREG_MR_ERR_INPUT,
             EINVAL);
    REJECTED("no flag", ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0), IBV_REREG_MR_ERR_CMD, EINVAL);
    REJECTED("CHANGE_PD to NULL", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0),
             IBV_REREG_MR_ERR_CMD, EINVAL);
    REJECTED("CHANGE_PD to another context's PD",
             ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, other_pd, NULL, 0, 0), IBV_REREG_MR_ERR_CMD,
             EINVAL);
    REJECTED("remote write without local write",
             ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE),
             IBV_REREG_MR_ERR_CMD, EINVAL);
    struct ibv_mr *dead = ibv_reg_mr(rx.pd, moved, SIZE, IBV_ACCESS_LOCAL_WRITE);
    EXPECT("dereg", dead && ibv_dereg_mr(dead) == 0);
    errno = 0;
    EXPECT("rereg of a destroyed MR",
           ibv_rereg_mr(dead, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, RW) ==
               IBV_REREG_MR_ERR_INPUT && errno == EINVAL);

    /* CHANGE_ACCESS: remote write granted. */
    uint32_t old_lkey = mr->lkey, old_rkey = mr->rkey;
    EXPECT("CHANGE_ACCESS",
           ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                        RW | IBV_ACCESS_MW_BIND) == 0 &&
               mr->addr == rx.buf && mr->length == SIZE && mr->pd == rx.pd &&
               mr->lkey == old_lkey && mr->rkey == old_rkey);
    memset(tx.buf, 'x', SIZE);
    EXPECT("RDMA WRITE after CHANGE_ACCESS",
           rdma(&tx, IBV_WR_RDMA_WRITE, rx.buf, SIZE, mr->rkey) == IBV_WC_SUCCESS &&
               all(rx.buf, 'x', SIZE));

    /* A bound window keeps the MR as it is. */
    struct ibv_mw *mw = ibv_alloc_mw(rx.pd, IBV_MW_TYPE_1);
    EXPECT("alloc_mw", mw != NULL);
    struct ibv_mw_bind bind = {.wr_id = 7, .send_flags = IBV_SEND_SIGNALED,
                               .bind_info = {.mr = mr, .addr = (uintptr_t)rx.buf, .length = 64,
                                             .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
    EXPECT("bind_mw", ibv_bind_mw(rx.qp, mw, &bind) == 0);
    struct ibv_wc wc = one(rx.cq);
    EXPECT("bind completion", wc.status == IBV_WC_SUCCESS && wc.wr_id == 7);
    REJECTED("rereg with a window bound",
             ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, RW), IBV_REREG_MR_ERR_CMD,
             EBUSY);
    EXPECT("dealloc_mw", ibv_dealloc_mw(mw) == 0);

    /* CHANGE_TRANSLATION: the MR moves to `moved`. */
    EXPECT("CHANGE_TRANSLATION",
           ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, moved, MOVED, 0) == 0 &&
               mr->addr == moved && mr->length == MOVED && mr->lkey == old_lkey &&
               mr->rkey == old_rkey);
    memset(tx.buf, 'y', SIZE);
    EXPECT("RDMA WRITE to the new range",
           rdma(&tx, IBV_WR_RDMA_WRITE, moved, MOVED, mr->rkey) == IBV_WC_SUCCESS &&
               all(moved, 'y', MOVED) && all(moved + MOVED, 0, SIZE - MOVED) &&
               all(rx.buf, 'x', SIZE));
    memset(tx.buf, 0, SIZE);
    memset(moved, 'z', 100);
    EXPECT("RDMA READ of the new range",
           rdma(&tx, IBV_WR_RDMA_READ, moved, MOVED, mr->rkey) == IBV_WC_SUCCESS &&
               all(tx.buf, 'z', 100) && all(tx.buf + 100, 'y', MOVED - 100));

    /* CHANGE_PD. */
    struct ibv_pd *pd2 = ibv_alloc_pd(rx.ctx);
    EXPECT("alloc_pd", pd2 != NULL);
    EXPECT("CHANGE_PD", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0 &&
                            mr->pd == pd2 && mr->addr == moved && mr->rkey == old_rkey);
    EXPECT("the new PD holds the MR", ibv_dealloc_pd(pd2) == EBUSY);

    /* The old range is out of the rkey's reach. */
    memset(tx.buf, 'w', SIZE);
    EXPECT("RDMA WRITE to the old range",
           rdma(&tx, IBV_WR_RDMA_WRITE, rx.buf, 64, old_rkey) == IBV_WC_REM_ACCESS_ERR &&
               all(rx.buf, 'x', SIZE));

    struct side *sides[2] = {&tx, &rx};
    EXPECT("dereg after rereg", ibv_dereg_mr(mr) == 0);
    rx.mr = NULL;
    EXPECT("dealloc the moved-to PD", ibv_dealloc_pd(pd2) == 0 && ibv_dealloc_pd(other_pd) == 0);
    for (int i = 0; i < 2; i++) {
        struct side *s = sides[i];
        if (ibv_destroy_qp(s->qp) || ibv_destroy_cq(s->cq) || (s->mr && ibv_dereg_mr(s->mr)) ||
            ibv_dealloc_pd(s->pd) || ibv_close_device(s->ctx))
            FAIL("teardown");
        free(s->buf);
    }
    free(moved);
    ibv_free_device_list(list);
    printf("rereg_mr: all %d checks passed\n", checks);
    return 0;
}
