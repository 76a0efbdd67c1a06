/* A program as if built against rdma-core RELEASE (newer than Debian's 44): linked (by
 * tests/newer_abi.rs) against a stub libibverbs.so.1 with that release's version nodes, so it
 * imports IBVERBS_PRIVATE_<n> and the release's newest IBVERBS_1.x, and references every
 * symbol of those nodes (newer_abi_refs, generated); run on the drop-in with BIND_NOW.
 * It then does what a program of that release does that a 44 one does not:
 *  - the private node's imports: ibv_query_gid_type, ibv_wr_opcode_str (49+);
 *  - verbs.h's inline ibv_query_port of 49+ passes the longer ibv_port_attr (with
 *    active_speed_ex): its tail must come back zeroed, not left as it was; so must the
 *    tail of an ibv_device_attr_ex longer than 44's;
 *  - 59+: ibv_reg_mr_ex (address, iova, dma-buf, DMA handle, bad masks), ibv_alloc_dmah;
 *  - 62+: ibv_query_port_speed, ibv_dm_export_dmabuf_fd;
 *  - 64+: ibv_alloc_buf / ibv_reg_buf_mr / ibv_free_buf;
 *  - 65: ibv_export_buf_dmabuf_fd, completion counters;
 *  - an RDMA WRITE between two devices from and into memory registered the newer ways,
 *    every byte checked.
 * The declarations of the newer API are written here from the newer verbs.h's documented
 * prototypes and layouts (Debian's 44 headers lack them).
 * Prints "newer_abi RELEASE: ... checks passed" and exits 0, or names the first failed check. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "rc_connect.h"

#ifndef RELEASE
#error "build with -DRELEASE=<rdma-core release>"
#endif

#define FAIL(...) do { fprintf(stderr, "FAILED: " __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } while (0)
static int checks;
#define EXPECT(what, cond) do { checks++; if (!(cond)) FAIL("%s", what); } while (0)

/* Every symbol of the release's nodes (generated beside this file by the test). */
extern void *const newer_abi_refs[];
extern const unsigned newer_abi_ref_count;

/* driver.h, private node: what ibv_devinfo, perftest and pyverbs import. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
                       unsigned int *type);
#if RELEASE >= 49
const char *ibv_wr_opcode_str(enum ibv_wr_opcode opcode);
struct port_attr_49 {
    struct ibv_port_attr attr44;
    uint32_t active_speed_ex;
};
_Static_assert(sizeof(struct port_attr_49) == 56, "ibv_port_attr of 49+");
#endif

#if RELEASE >= 59
struct ibv_dmah;
struct ibv_buf;
struct mr_init_attr {
    size_t length;
    int access;
    uint64_t comp_mask;
    uint64_t iova;
    void *addr;
    int fd;
    uint64_t fd_offset;
    struct ibv_dmah *dmah;
#if RELEASE >= 64
    struct ibv_buf *buf;
#endif
};
_Static_assert(offsetof(struct mr_init_attr, comp_mask) == 16, "ibv_mr_init_attr");
_Static_assert(offsetof(struct mr_init_attr, fd_offset) == 48, "ibv_mr_init_attr");
#if RELEASE >= 64
_Static_assert(offsetof(struct mr_init_attr, buf) == 64 && sizeof(struct mr_init_attr) == 72,
               "ibv_mr_init_attr");
#endif
enum { MASK_IOVA = 1, MASK_ADDR = 2, MASK_FD = 4, MASK_FD_OFFSET = 8, MASK_DMAH = 16 };
struct dmah_init_attr { uint32_t comp_mask; uint32_t cpu_id; uint8_t ph; uint8_t tph_mem_type; };
struct ibv_mr *ibv_reg_mr_ex(struct ibv_pd *pd, struct mr_init_attr *attr);
struct ibv_dmah *ibv_alloc_dmah(struct ibv_context *context, struct dmah_init_attr *attr);
#endif
#if RELEASE >= 62
int ibv_query_port_speed(struct ibv_context *context, uint32_t port_num, uint64_t *speed);
int ibv_dm_export_dmabuf_fd(struct ibv_dm *dm);
#endif
#if RELEASE >= 64
void *ibv_alloc_buf(struct ibv_pd *pd, size_t size, struct ibv_buf **buf);
void ibv_free_buf(struct ibv_buf *buf);
struct ibv_mr *ibv_reg_buf_mr(struct ibv_pd *pd, struct ibv_buf *buf, void *addr, size_t length,
                              int access);
#endif
#if RELEASE >= 65
struct comp_cntr_init_attr { uint32_t comp_mask; uint32_t type; uint32_t flags; };
struct comp_cntr_caps { uint64_t max_value; uint32_t max_counters; uint32_t supported_ops; };
int ibv_export_buf_dmabuf_fd(struct ibv_buf *buf);
void *ibv_create_comp_cntr(struct ibv_context *context, struct comp_cntr_init_attr *attr);
int _ibv_query_comp_cntr_caps(struct ibv_context *context, struct comp_cntr_caps *caps,
                              size_t caps_size);
#endif

#define SIZE 8192
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    union ibv_gid gid;
};

static void open_side(struct side *s, struct ibv_device *dev)
{
    s->ctx = ibv_open_device(dev);
    if (!s->ctx) FAIL("open");
    s->pd = ibv_alloc_pd(s->ctx);
    s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
    if (!s->pd || !s->cq) FAIL("resources");
    struct ibv_qp_init_attr qa = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    s->qp = ibv_create_qp(s->pd, &qa);
    if (!s->qp) FAIL("create_qp");
    if (ibv_query_gid(s->ctx, 1, 1, &s->gid)) FAIL("query_gid");
}

/* Registers `len` bytes at `addr` the newest way the release has. */
static struct ibv_mr *reg_newer(struct ibv_pd *pd, void *addr, size_t len, int access)
{
#if RELEASE >= 59
    struct mr_init_attr a = {.length = len, .access = access, .comp_mask = MASK_ADDR | MASK_IOVA,
                             .iova = (uintptr_t)addr, .addr = addr};
    return ibv_reg_mr_ex(pd, &a);
#else
    return ibv_reg_mr(pd, addr, len, access);
#endif
}

static void private_node(struct ibv_context *ctx)
{
    unsigned int type = 99;
    EXPECT("ibv_query_gid_type", ibv_query_gid_type(ctx, 1, 1, &type) == 0);
    EXPECT("GID 1 is RoCE v2 (sysfs type 1)", type == 1);
    EXPECT("ibv_query_gid_type of a bad port", ibv_query_gid_type(ctx, 9, 1, &type) != 0);
#if RELEASE >= 49
    EXPECT("ibv_wr_opcode_str(SEND)", strcmp(ibv_wr_opcode_str(IBV_WR_SEND), "send") == 0);
    EXPECT("ibv_wr_opcode_str(ATOMIC_WRITE)",
           strcmp(ibv_wr_opcode_str(IBV_WR_ATOMIC_WRITE), "atomic-write") == 0);
    EXPECT("ibv_wr_opcode_str(99)", strcmp(ibv_wr_opcode_str(99), "unknown") == 0);

    /* verbs.h 49+'s inline ibv_query_port, as compiled into the program. */
    struct port_attr_49 p;
    memset(&p, 0xa5, sizeof(p));
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
    EXPECT("verbs_context has query_port", vctx != NULL);
    EXPECT("query_port with the 49+ size",
           vctx->query_port(ctx, 1, &p.attr44, sizeof(p)) == 0);
    EXPECT("port is active", p.attr44.state == IBV_PORT_ACTIVE);
    EXPECT("active_speed_ex zeroed (read active_speed)", p.active_speed_ex == 0);
    EXPECT("active_speed set", p.attr44.active_speed != 0 && p.attr44.active_speed != 0xa5);
#endif
}

/* An extensible structure longer than 44's, as a newer verbs.h may pass it: the part the
 * library does not know comes back zeroed, the part it knows filled. */
static void longer_device_attr_ex(struct ibv_context *ctx)
{
    struct {
        struct ibv_device_attr_ex attr44;
        unsigned char newer[64];
    } d;
    memset(&d, 0xa5, sizeof(d));
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_device_ex);
    EXPECT("verbs_context has query_device_ex", vctx != NULL);
    EXPECT("query_device_ex with a longer structure",
           vctx->query_device_ex(ctx, NULL, &d.attr44, sizeof(d)) == 0);
    EXPECT("phys_port_cnt filled", d.attr44.orig_attr.phys_port_cnt == 1);
    int zero = 1;
    for (size_t i = 0; i < sizeof(d.newer); i++)
        zero &= d.newer[i] == 0;
    EXPECT("the unknown tail zeroed", zero);
}

/* Object import (1.10): nothing to import from; the void unimport leaves errno alone. */
static void import_objects(struct side *s)
{
    errno = 0;
    EXPECT("ibv_import_pd: NULL, EOPNOTSUPP", !ibv_import_pd(s->ctx, 1) && errno == EOPNOTSUPP);
    errno = 1234;
    ibv_unimport_pd(s->pd);
    EXPECT("ibv_unimport_pd leaves errno alone", errno == 1234);
}

static void newer_verbs(struct side *s)
{
#if RELEASE >= 59
    char *mem = calloc(1, SIZE);
    struct mr_init_attr a = {.length = SIZE, .access = RW, .comp_mask = MASK_ADDR, .addr = mem};
    struct ibv_mr *mr = ibv_reg_mr_ex(s->pd, &a);
    EXPECT("reg_mr_ex ADDR", mr && mr->addr == mem && mr->length == SIZE && mr->pd == s->pd &&
                                 mr->context == s->ctx && mr->lkey != 0);
    EXPECT("dereg of a reg_mr_ex MR", ibv_dereg_mr(mr) == 0);
    a.comp_mask = MASK_ADDR | MASK_IOVA;
    a.iova = 0x1000;
    errno = 0;
    EXPECT("reg_mr_ex with iova != addr: EOPNOTSUPP", !ibv_reg_mr_ex(s->pd, &a) && errno == EOPNOTSUPP);
    a.comp_mask = MASK_FD | MASK_FD_OFFSET | MASK_IOVA;
    a.fd = 0;
    errno = 0;
    EXPECT("reg_mr_ex dma-buf: EOPNOTSUPP", !ibv_reg_mr_ex(s->pd, &a) && errno == EOPNOTSUPP);
    a.comp_mask = MASK_FD | MASK_ADDR;
    errno = 0;
    EXPECT("reg_mr_ex FD with ADDR: EINVAL", !ibv_reg_mr_ex(s->pd, &a) && errno == EINVAL);
    a.comp_mask = MASK_ADDR | MASK_DMAH;
    errno = 0;
    EXPECT("reg_mr_ex DMA handle: EOPNOTSUPP", !ibv_reg_mr_ex(s->pd, &a) && errno == EOPNOTSUPP);
    a.comp_mask = MASK_IOVA;
    errno = 0;
    EXPECT("reg_mr_ex without ADDR: EINVAL", !ibv_reg_mr_ex(s->pd, &a) && errno == EINVAL);
    a.comp_mask = MASK_ADDR;
    errno = 0;
    EXPECT("reg_mr_ex on no PD: EINVAL", !ibv_reg_mr_ex(NULL, &a) && errno == EINVAL);
    struct dmah_init_attr da = {0};
    errno = 0;
    EXPECT("alloc_dmah: EOPNOTSUPP", !ibv_alloc_dmah(s->ctx, &da) && errno == EOPNOTSUPP);
    free(mem);
#endif
#if RELEASE >= 62
    uint64_t speed = 0;
    EXPECT("query_port_speed", ibv_query_port_speed(s->ctx, 1, &speed) == 0);
    EXPECT("port speed: 1X EDR = 250 x 100 Mb/s", speed == 250);
    EXPECT("query_port_speed of port 2: EINVAL", ibv_query_port_speed(s->ctx, 2, &speed) == EINVAL);
    EXPECT("query_port_speed of port 300: EINVAL",
           ibv_query_port_speed(s->ctx, 300, &speed) == EINVAL);
    errno = 0;
    EXPECT("dm_export_dmabuf_fd: -1 EOPNOTSUPP",
           ibv_dm_export_dmabuf_fd(NULL) == -1 && errno == EOPNOTSUPP);
#endif
#if RELEASE >= 64
    struct ibv_buf *buf = NULL;
    char *b = ibv_alloc_buf(s->pd, 3 * 4096, &buf);
    EXPECT("alloc_buf", b && buf && ((uintptr_t)b % 4096) == 0);
    memset(b, 1, 3 * 4096);
    struct ibv_mr *bm = ibv_reg_buf_mr(s->pd, buf, b + 4096, 2 * 4096, RW);
    EXPECT("reg_buf_mr inside the buffer", bm && bm->addr == b + 4096 && bm->length == 2 * 4096);
    errno = 0;
    EXPECT("reg_buf_mr past its end: EINVAL",
           !ibv_reg_buf_mr(s->pd, buf, b + 4096, 2 * 4096 + 1, RW) && errno == EINVAL);
    errno = 0;
    EXPECT("reg_buf_mr before it: EINVAL", !ibv_reg_buf_mr(s->pd, buf, b - 1, 8, RW) && errno == EINVAL);
    struct ibv_pd *other = ibv_alloc_pd(s->ctx);
    errno = 0;
    EXPECT("reg_buf_mr with another PD: EINVAL",
           !ibv_reg_buf_mr(other, buf, b, 8, RW) && errno == EINVAL);
    EXPECT("dealloc other PD", ibv_dealloc_pd(other) == 0);
#if RELEASE >= 65
    errno = 0;
    EXPECT("export_buf_dmabuf_fd: -1 ENODATA", ibv_export_buf_dmabuf_fd(buf) == -1 && errno == ENODATA);
    struct comp_cntr_init_attr ca = {0};
    errno = 0;
    EXPECT("create_comp_cntr: EOPNOTSUPP", !ibv_create_comp_cntr(s->ctx, &ca) && errno == EOPNOTSUPP);
    struct comp_cntr_caps caps;
    EXPECT("query_comp_cntr_caps: EOPNOTSUPP",
           _ibv_query_comp_cntr_caps(s->ctx, &caps, sizeof(caps)) == EOPNOTSUPP);
#endif
    EXPECT("dereg buf MR", ibv_dereg_mr(bm) == 0);
    ibv_free_buf(buf);
#endif
    (void)s;
}

/* An RDMA WRITE from a's memory into b's, both registered the release's newest way. */
static void write_through(struct side *a, struct side *b)
{
    char *src = malloc(SIZE);
    for (int i = 0; i < SIZE; i++) src[i] = (char)(i * 7 + RELEASE);
    struct ibv_mr *smr = reg_newer(a->pd, src, SIZE, IBV_ACCESS_LOCAL_WRITE);
#if RELEASE >= 64
    struct ibv_buf *buf = NULL;
    char *dst = ibv_alloc_buf(b->pd, SIZE, &buf);
    if (!dst) FAIL("alloc_buf");
    memset(dst, 0, SIZE);
    struct ibv_mr *dmr = ibv_reg_buf_mr(b->pd, buf, dst, SIZE, RW);
#else
    char *dst = calloc(1, SIZE);
    struct ibv_mr *dmr = reg_newer(b->pd, dst, SIZE, RW);
#endif
    if (!smr || !dmr) FAIL("registrations for the write");
    if (rc_connect(a->qp, b->qp->qp_num, &b->gid, RW, 1) ||
        rc_connect(b->qp, a->qp->qp_num, &a->gid, RW, 1))
        FAIL("connect");
    struct ibv_sge sge = {.addr = (uintptr_t)src, .length = SIZE, .lkey = smr->lkey};
    struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)dst, .rkey = dmr->rkey}};
    struct ibv_send_wr *bad;
    EXPECT("post RDMA WRITE", ibv_post_send(a->qp, &wr, &bad) == 0);
    struct ibv_wc wc;
    int n = 0;
    for (int spins = 0; n == 0 && spins < 20000; spins++) {
        n = ibv_poll_cq(a->cq, 1, &wc);
        if (n == 0) usleep(500);
    }
    EXPECT("write completed", n == 1 && wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS);
    EXPECT("every byte written", memcmp(src, dst, SIZE) == 0);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
#if RELEASE >= 64
    ibv_free_buf(buf);
#else
    free(dst);
#endif
    free(src);
}

int main(void)
{
    for (unsigned i = 0; i < newer_abi_ref_count; i++)
        if (!newer_abi_refs[i]) FAIL("symbol %u unresolved", i);
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 2) FAIL("two devices");
    struct side a, b;
    open_side(&a, list[0]);
    open_side(&b, list[1]);
    private_node(a.ctx);
    longer_device_attr_ex(a.ctx);
    import_objects(&a);
    newer_verbs(&a);
    write_through(&a, &b);
    printf("newer_abi %d: %u symbols bound, %d checks passed\n", RELEASE, newer_abi_ref_count,
           checks);
    return 0;
}
