/* Debian's librpma 1.2, unmodified, on the drop-in libibverbs.so.1 + librdmacm.so.1: one
 * server with a shared RQ and NCONN client processes, through librpma's public API only.
 *
 *   rpma_seed server ADDR PORT NCONN
 *   rpma_seed client ADDR PORT ID        (ID = 0..NCONN-1, one process per connection)
 *
 * The seed is rpma_srq_recv(3): the server makes a shared RQ (rpma_srq_new) with its own
 * receive CQ, posts more receive buffers than the clients will send messages (rpma_srq_recv,
 * each buffer with its own op_context), then accepts NCONN connections whose QPs use the
 * shared RQ (rpma_conn_cfg_set_srq). Every client sends K messages with distinct lengths and
 * contents (client id + sequence number); the server collects the completions from the shared
 * RQ's receive CQ (rpma_srq_get_rcq, rpma_cq_wait, rpma_cq_get_wc) and checks that every
 * message came exactly once, into one of the posted buffers ("an unordered set": any buffer,
 * any order), that wc.wr_id is the buffer's op_context, and byte_len, qp_num and every byte.
 *
 * Remote memory access: the server registers one region, NCONN slices of SLICE bytes, and
 * gives its descriptor (rpma_mr_get_descriptor) to every client in the accept's private data.
 * A client (rpma_conn_get_private_data, rpma_mr_remote_from_descriptor) writes its slice
 * (rpma_write), reads it back (rpma_read), flushes it (rpma_flush), writes 8 bytes atomically
 * to an 8-aligned offset (rpma_atomic_write), flushes again and reads the whole slice back.
 * Flush: librpma 1.2 allows RPMA_FLUSH_TYPE_PERSISTENT only if the region was registered with
 * RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT *and* the remote peer declared "direct write to pmem"
 * (rpma_peer_cfg_set_direct_write_to_pmem + rpma_conn_apply_remote_peer_cfg), a claim about
 * the platform (DDIO off, PMem behind the region). The server's region is ordinary DRAM, so
 * it is registered for RPMA_FLUSH_TYPE_VISIBILITY only; the client checks that the remote
 * region says so (rpma_mr_remote_get_flush_type) and that a PERSISTENT flush is refused with
 * RPMA_E_NOSUPP before anything is posted, and flushes with VISIBILITY.
 * Then the client sends a last message (DONE); on it the server checks the client's slice
 * byte by byte (its write, the untouched gap, the atomic word, the untouched tail) and sends
 * the client an acknowledgement (the client posted a receive with rpma_conn_req_recv before
 * connecting). The server disconnects once the acknowledgement's send completed, the client
 * after it sees the connection closed; each side deletes its connection once it is closed.
 *
 * Every completion is checked: status IBV_WC_SUCCESS, opcode, wr_id (the op_context).
 * Every wait is bounded: the event/completion file descriptors are made non-blocking (as
 * librpma(7) describes) and waited for with poll(2) and a deadline.
 * Prints "server checks passed" / "client N checks passed"; any failure exits 1 with the reason.
 * RPMA_SEED_LOG=<0..5> raises librpma's log threshold (default: warnings and errors). */
#include <librpma.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, "%s: ", Role); fprintf(stderr, __VA_ARGS__); \
                       fprintf(stderr, "\n"); exit(1); } while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)
/* an rpma_* call that must return 0 */
#define RPMA(call) do { int rpma_ret_ = (call); \
                        if (rpma_ret_) FAIL("%s failed: %d (%s)", #call, rpma_ret_, \
                                            rpma_err_2str(rpma_ret_)); } while (0)

static char Role[32] = "rpma_seed";
static int Expected_error;  /* set around calls that must fail: their log lines are expected */

enum {
    K = 4,                  /* data messages per client; each also sends one DONE message */
    MAX_CONN = 16,
    SLOT_SIZE = 128,        /* one receive buffer of the shared RQ */
    SPARE_SLOTS = 5,        /* buffers nobody will fill */
    SLICE = 4096,           /* one client's part of the server's region */
    WRITE_LEN = 3001,       /* rpma_write length (not a multiple of 8 on purpose) */
    ATOMIC_OFF = 3008,      /* rpma_atomic_write offset within the slice (8-aligned) */
    ACK_SIZE = 32,
    WAIT_MS = 25000,        /* any single wait for the peer */
    KIND_DATA = 1,
    KIND_DONE = 2,
};

#define MSG_MAGIC 0x52504d41u   /* "RPMA" */
#define PDATA_MAGIC 0x53454544u /* "SEED" */

/* the head of every message a client sends */
struct msg_hdr {
    uint32_t magic;
    uint16_t id;
    uint16_t seq;   /* 0..K-1 for data, K for DONE */
    uint16_t kind;
    uint16_t len;   /* the whole message's length, header included */
};

/* the client's connect private data */
struct client_pdata { uint32_t magic; uint32_t id; };

/* the server's accept private data: the region's descriptor */
struct server_pdata {
    uint32_t magic;
    uint32_t nconn;
    uint8_t desc_size;
    uint8_t desc[64];
};

/* the acknowledgement the server sends a client once its slice is checked */
struct ack { uint32_t magic; uint32_t id; char text[24]; };

/* ---- deterministic contents ---- */

static size_t msg_len(unsigned id, unsigned seq) {
    /* distinct lengths for the messages of one client, all within a slot */
    return sizeof(struct msg_hdr) + 3 + (id * 7 + seq * 13) % 97;
}

static uint8_t msg_byte(unsigned id, unsigned seq, size_t i) {
    return (uint8_t)(id * 41 + seq * 17 + i * 5 + 3);
}

static uint8_t region_byte(size_t off) {   /* the server's initial region contents */
    return (uint8_t)((off ^ (off >> 8)) * 29 + 5);
}

static uint8_t write_byte(unsigned id, size_t i) {
    return (uint8_t)(id * 53 + i * 7 + 1);
}

static void atomic_value(unsigned id, char v[8]) {
    for (int j = 0; j < 8; j++) v[j] = (char)(0xA0 + id * 8 + j);
}

/* what a client's slice must hold at the end: 0 if good, else 1 + the first bad offset */
static size_t slice_bad(const uint8_t *slice, unsigned id, size_t slice_base) {
    char av[8];
    atomic_value(id, av);
    for (size_t i = 0; i < SLICE; i++) {
        uint8_t want;
        if (i < WRITE_LEN) want = write_byte(id, i);
        else if (i >= ATOMIC_OFF && i < ATOMIC_OFF + 8) want = (uint8_t)av[i - ATOMIC_OFF];
        else want = region_byte(slice_base + i);
        if (slice[i] != want) return i + 1;
    }
    return 0;
}

/* ---- logging, time, bounded waits ---- */

static void log_fn(enum rpma_log_level level, const char *file, const int line,
                   const char *func, const char *fmt, ...) {
    va_list ap;
    if (Expected_error && level <= RPMA_LOG_LEVEL_ERROR) return;
    fprintf(stderr, "%s: librpma[%d] %s:%d %s(): ", Role, level, file ? file : "-",
            file ? line : 0, file ? func : "-");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

static void setup_log(void) {
    RPMA(rpma_log_set_function(log_fn));
    const char *lvl = getenv("RPMA_SEED_LOG");
    if (lvl) RPMA(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, (enum rpma_log_level)atoi(lvl)));
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_nonblock(int fd, const char *what) {
    int fl = fcntl(fd, F_GETFL);
    CHECK(fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl(%s fd %d): %s", what, fd,
          strerror(errno));
}

/* wait until fd is readable, at most until deadline (ms, CLOCK_MONOTONIC) */
static void wait_readable(int fd, long long deadline, const char *what) {
    for (;;) {
        long long left = deadline - now_ms();
        CHECK(left > 0, "timed out waiting for %s", what);
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int n = poll(&p, 1, (int)left);
        if (n < 0 && errno == EINTR) continue;
        CHECK(n >= 0, "poll(%s): %s", what, strerror(errno));
        if (n == 0) continue;
        CHECK(!(p.revents & (POLLERR | POLLNVAL)), "poll(%s): revents %#x", what, p.revents);
        return;
    }
}

/* the next completion of cq (whose channel fd is non-blocking), waiting at most WAIT_MS */
static void next_wc(struct rpma_cq *cq, int fd, struct ibv_wc *wc, const char *what) {
    long long deadline = now_ms() + WAIT_MS;
    for (;;) {
        int got = 0;
        int ret = rpma_cq_get_wc(cq, 1, wc, &got);
        if (ret == 0) {
            CHECK(got == 1, "rpma_cq_get_wc (%s) got %d completions, asked for 1", what, got);
            return;
        }
        CHECK(ret == RPMA_E_NO_COMPLETION, "rpma_cq_get_wc (%s): %d (%s)", what, ret,
              rpma_err_2str(ret));
        wait_readable(fd, deadline, what);
        ret = rpma_cq_wait(cq);
        /* NO_COMPLETION: the channel had no event after all (non-blocking fd); poll again */
        CHECK(ret == 0 || ret == RPMA_E_NO_COMPLETION, "rpma_cq_wait (%s): %d (%s)", what,
              ret, rpma_err_2str(ret));
    }
}

static void check_wc(const struct ibv_wc *wc, const void *ctx, int op1, int op2,
                     const char *what) {
    CHECK(wc->status == IBV_WC_SUCCESS, "%s: completion status %d (%s), vendor_err %#x", what,
          wc->status, ibv_wc_status_str(wc->status), wc->vendor_err);
    CHECK(wc->wr_id == (uint64_t)(uintptr_t)ctx, "%s: wr_id %#llx, expected op_context %p",
          what, (unsigned long long)wc->wr_id, ctx);
    CHECK((int)wc->opcode == op1 || (int)wc->opcode == op2, "%s: opcode %d, expected %d", what,
          wc->opcode, op1);
}

/* librpma 1.2 maps only ENODATA from rdma_get_cm_event to RPMA_E_NO_EVENT, but librdmacm on
 * a non-blocking channel fails with EAGAIN (RPMA_E_PROVIDER): wait for the fd first, as
 * librpma's examples do, and call only when an event is there */
static enum rpma_conn_event next_conn_event(struct rpma_conn *conn, int fd, const char *what) {
    wait_readable(fd, now_ms() + WAIT_MS, what);
    enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
    RPMA(rpma_conn_next_event(conn, &ev));
    return ev;
}

static void expect_conn_event(struct rpma_conn *conn, int fd, enum rpma_conn_event want,
                              const char *what) {
    enum rpma_conn_event ev = next_conn_event(conn, fd, what);
    CHECK(ev == want, "%s: connection event %s, expected %s", what,
          rpma_utils_conn_event_2str(ev), rpma_utils_conn_event_2str(want));
}

static void *page_alloc(size_t size) {
    void *p = NULL;
    CHECK(posix_memalign(&p, 4096, size) == 0, "posix_memalign(%zu) failed", size);
    return p;
}

/* ================================ server ================================ */

struct sconn {
    struct rpma_conn *conn;
    struct rpma_cq *cq;
    int cq_fd, ev_fd;
    uint32_t qp_num;
    unsigned id;
    int done;            /* DONE received, slice checked, ack sent */
    int data_seen;       /* data messages received so far (they must come in order) */
};

static int server(const char *addr, const char *port, unsigned nconn) {
    struct ibv_context *dev = NULL;
    struct rpma_peer *peer = NULL;
    RPMA(rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev));
    RPMA(rpma_peer_new(dev, &peer));

    /* the region the clients write, read, flush and atomically write */
    size_t region_size = (size_t)nconn * SLICE;
    uint8_t *region = page_alloc(region_size);
    for (size_t i = 0; i < region_size; i++) region[i] = region_byte(i);
    struct rpma_mr_local *region_mr = NULL;
    RPMA(rpma_mr_reg(peer, region, region_size,
                     RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
                     RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &region_mr));
    struct server_pdata spd;
    memset(&spd, 0, sizeof spd);
    spd.magic = PDATA_MAGIC;
    spd.nconn = nconn;
    size_t desc_size = 0;
    RPMA(rpma_mr_get_descriptor_size(region_mr, &desc_size));
    CHECK(desc_size > 0 && desc_size <= sizeof spd.desc, "descriptor size %zu", desc_size);
    spd.desc_size = (uint8_t)desc_size;
    RPMA(rpma_mr_get_descriptor(region_mr, spd.desc));

    /* the shared RQ's receive buffers: more than the messages that will come */
    unsigned total_msgs = nconn * (K + 1);
    unsigned nslots = total_msgs + SPARE_SLOTS;
    uint8_t *slots = page_alloc((size_t)nslots * SLOT_SIZE);
    memset(slots, 0xEE, (size_t)nslots * SLOT_SIZE);
    struct rpma_mr_local *slots_mr = NULL;
    RPMA(rpma_mr_reg(peer, slots, (size_t)nslots * SLOT_SIZE, RPMA_MR_USAGE_RECV, &slots_mr));
    /* op_context of slot i: &slot_ctx[i] */
    unsigned *slot_ctx = calloc(nslots, sizeof *slot_ctx);
    int *slot_used = calloc(nslots, sizeof *slot_used);
    CHECK(slot_ctx && slot_used, "calloc");

    struct rpma_srq_cfg *srq_cfg = NULL;
    struct rpma_srq *srq = NULL;
    struct rpma_cq *rcq = NULL;
    RPMA(rpma_srq_cfg_new(&srq_cfg));
    RPMA(rpma_srq_cfg_set_rq_size(srq_cfg, nslots));
    RPMA(rpma_srq_cfg_set_rcq_size(srq_cfg, nslots));
    RPMA(rpma_srq_new(peer, srq_cfg, &srq));
    RPMA(rpma_srq_cfg_delete(&srq_cfg));
    RPMA(rpma_srq_get_rcq(srq, &rcq));
    CHECK(rcq != NULL, "rpma_srq_get_rcq gave no receive CQ though rcq_size is %u", nslots);
    int rcq_fd = -1;
    RPMA(rpma_cq_get_fd(rcq, &rcq_fd));
    set_nonblock(rcq_fd, "shared receive CQ");
    /* posted before any connection exists: a client may send before the others connect */
    for (unsigned i = 0; i < nslots; i++) {
        slot_ctx[i] = i;
        RPMA(rpma_srq_recv(srq, slots_mr, (size_t)i * SLOT_SIZE, SLOT_SIZE, &slot_ctx[i]));
    }

    /* the buffer the acknowledgements are sent from */
    struct ack *acks = page_alloc((size_t)nconn * ACK_SIZE);
    struct rpma_mr_local *acks_mr = NULL;
    RPMA(rpma_mr_reg(peer, acks, (size_t)nconn * ACK_SIZE, RPMA_MR_USAGE_SEND, &acks_mr));

    struct rpma_conn_cfg *cfg = NULL;
    RPMA(rpma_conn_cfg_new(&cfg));
    RPMA(rpma_conn_cfg_set_srq(cfg, srq));
    RPMA(rpma_conn_cfg_set_sq_size(cfg, 4));
    RPMA(rpma_conn_cfg_set_cq_size(cfg, 4));
    RPMA(rpma_conn_cfg_set_timeout(cfg, 5000));
    struct rpma_srq *cfg_srq = NULL;
    RPMA(rpma_conn_cfg_get_srq(cfg, &cfg_srq));
    CHECK(cfg_srq == srq, "rpma_conn_cfg_get_srq gave %p, set %p", (void *)cfg_srq, (void *)srq);

    struct rpma_ep *ep = NULL;
    RPMA(rpma_ep_listen(peer, addr, port, &ep));
    int ep_fd = -1;
    RPMA(rpma_ep_get_fd(ep, &ep_fd));
    set_nonblock(ep_fd, "endpoint");
    printf("server listening on %s:%s for %u connections\n", addr, port, nconn);
    fflush(stdout);

    /* accept all NCONN connections first (their messages may already be arriving) */
    struct sconn sc[MAX_CONN];
    memset(sc, 0, sizeof sc);
    struct sconn *by_id[MAX_CONN] = { 0 };
    for (unsigned c = 0; c < nconn; c++) {
        struct rpma_conn_req *req = NULL;
        wait_readable(ep_fd, now_ms() + WAIT_MS, "a connection request");
        RPMA(rpma_ep_next_conn_req(ep, cfg, &req));
        struct rpma_conn_private_data pd = { 0 };
        RPMA(rpma_conn_req_get_private_data(req, &pd));
        CHECK(pd.ptr && pd.len >= sizeof(struct client_pdata),
              "connection request #%u: private data %p, %u bytes, expected >= %zu", c, pd.ptr,
              pd.len, sizeof(struct client_pdata));
        struct client_pdata cpd;
        memcpy(&cpd, pd.ptr, sizeof cpd);
        CHECK(cpd.magic == PDATA_MAGIC && cpd.id < nconn && !by_id[cpd.id],
              "connection request #%u: bad private data (magic %#x, id %u)", c, cpd.magic,
              cpd.id);
        struct rpma_conn_private_data out = { .ptr = &spd, .len = sizeof spd };
        RPMA(rpma_conn_req_connect(&req, &out, &sc[c].conn));
        CHECK(req == NULL, "rpma_conn_req_connect did not consume the request");
        sc[c].id = cpd.id;
        by_id[cpd.id] = &sc[c];
        RPMA(rpma_conn_get_event_fd(sc[c].conn, &sc[c].ev_fd));
        set_nonblock(sc[c].ev_fd, "connection event");
        char what[64];
        snprintf(what, sizeof what, "client %u's connection established", cpd.id);
        expect_conn_event(sc[c].conn, sc[c].ev_fd, RPMA_CONN_ESTABLISHED, what);
        RPMA(rpma_conn_get_qp_num(sc[c].conn, &sc[c].qp_num));
        RPMA(rpma_conn_get_cq(sc[c].conn, &sc[c].cq));
        RPMA(rpma_cq_get_fd(sc[c].cq, &sc[c].cq_fd));
        set_nonblock(sc[c].cq_fd, "connection CQ");
        struct rpma_cq *crcq = (struct rpma_cq *)1;
        RPMA(rpma_conn_get_rcq(sc[c].conn, &crcq));
        CHECK(crcq == NULL, "the connection has its own receive CQ though it uses the shared RQ");
        for (unsigned o = 0; o < c; o++)
            CHECK(sc[o].qp_num != sc[c].qp_num, "two connections with qp_num %u", sc[c].qp_num);
        printf("server: client %u connected (qp %u)\n", cpd.id, sc[c].qp_num);
        fflush(stdout);
    }
    RPMA(rpma_ep_shutdown(&ep));

    /* collect every message from the shared receive CQ */
    static int seen[MAX_CONN][K + 1];
    memset(seen, 0, sizeof seen);
    unsigned received = 0, acked = 0;
    while (received < total_msgs) {
        struct ibv_wc wc;
        next_wc(rcq, rcq_fd, &wc, "a message on the shared RQ");
        CHECK(wc.status == IBV_WC_SUCCESS, "receive #%u: status %d (%s), wr_id %#llx", received,
              wc.status, ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
        CHECK(wc.opcode == IBV_WC_RECV, "receive #%u: opcode %d, expected IBV_WC_RECV (%d)",
              received, wc.opcode, IBV_WC_RECV);
        uintptr_t ctx = (uintptr_t)wc.wr_id;
        CHECK(ctx >= (uintptr_t)slot_ctx && ctx < (uintptr_t)(slot_ctx + nslots) &&
              (ctx - (uintptr_t)slot_ctx) % sizeof *slot_ctx == 0,
              "receive #%u: wr_id %#lx is none of the posted op_contexts", received,
              (unsigned long)ctx);
        unsigned slot = *(unsigned *)ctx;
        CHECK(slot == (ctx - (uintptr_t)slot_ctx) / sizeof *slot_ctx, "op_context corrupted");
        CHECK(!slot_used[slot], "receive #%u: buffer %u completed twice", received, slot);
        slot_used[slot] = 1;
        const uint8_t *buf = slots + (size_t)slot * SLOT_SIZE;
        CHECK(wc.byte_len >= sizeof(struct msg_hdr) && wc.byte_len <= SLOT_SIZE,
              "receive #%u (buffer %u): byte_len %u", received, slot, wc.byte_len);
        struct msg_hdr h;
        memcpy(&h, buf, sizeof h);
        CHECK(h.magic == MSG_MAGIC && h.id < nconn && h.seq <= K,
              "buffer %u: bad message header (magic %#x id %u seq %u)", slot, h.magic, h.id,
              h.seq);
        CHECK(h.kind == (h.seq == K ? KIND_DONE : KIND_DATA), "buffer %u: kind %u for seq %u",
              slot, h.kind, h.seq);
        CHECK(!seen[h.id][h.seq], "message (client %u, seq %u) received twice (buffer %u)",
              h.id, h.seq, slot);
        seen[h.id][h.seq] = 1;
        size_t len = msg_len(h.id, h.seq);
        CHECK(h.len == len && wc.byte_len == len,
              "message (client %u, seq %u): byte_len %u, header len %u, expected %zu", h.id,
              h.seq, wc.byte_len, h.len, len);
        for (size_t i = sizeof h; i < len; i++)
            CHECK(buf[i] == msg_byte(h.id, h.seq, i),
                  "message (client %u, seq %u) in buffer %u: byte %zu is %#x, expected %#x",
                  h.id, h.seq, slot, i, buf[i], msg_byte(h.id, h.seq, i));
        for (size_t i = len; i < SLOT_SIZE; i++)
            CHECK(buf[i] == 0xEE, "buffer %u: byte %zu past the message (%zu bytes) is %#x",
                  slot, i, len, buf[i]);
        struct sconn *s = by_id[h.id];
        CHECK(wc.qp_num == s->qp_num, "message (client %u, seq %u): qp_num %u, client's QP is %u",
              h.id, h.seq, wc.qp_num, s->qp_num);
        received++;

        if (h.kind == KIND_DATA) {
            /* one QP's messages complete on the shared RQ in the order they were sent */
            CHECK(h.seq == s->data_seen, "client %u: message seq %u after %d data messages",
                  h.id, h.seq, s->data_seen);
            s->data_seen++;
            continue;
        }
        /* DONE: the client's RMA is over; check its slice, then acknowledge */
        CHECK(s->data_seen == K, "client %u: DONE after %d of %d data messages", h.id,
              s->data_seen, K);
        size_t base = (size_t)h.id * SLICE;
        size_t bad = slice_bad(region + base, h.id, base);
        CHECK(!bad, "client %u's slice: byte %zu (region offset %zu) is %#x after its write / "
              "atomic write", h.id, bad - 1, base + bad - 1, region[base + bad - 1]);
        struct ack *a = (struct ack *)((uint8_t *)acks + (size_t)h.id * ACK_SIZE);
        memset(a, 0, ACK_SIZE);
        a->magic = MSG_MAGIC;
        a->id = h.id;
        snprintf(a->text, sizeof a->text, "slice %u ok", h.id);
        const void *send_ctx = &by_id[h.id]->done;
        RPMA(rpma_send(s->conn, acks_mr, (size_t)h.id * ACK_SIZE, sizeof(struct ack),
                       RPMA_F_COMPLETION_ALWAYS, send_ctx));
        struct ibv_wc swc;
        next_wc(s->cq, s->cq_fd, &swc, "the acknowledgement's send completion");
        check_wc(&swc, send_ctx, IBV_WC_SEND, IBV_WC_SEND, "acknowledgement send");
        CHECK(swc.qp_num == s->qp_num, "ack send: qp_num %u, expected %u", swc.qp_num,
              s->qp_num);
        /* The server disconnects first, once the acknowledgement is acknowledged: a client
         * disconnecting as soon as it has the message could have its DREQ move this QP to
         * ERR before the transport's ACK of that SEND arrives (flushing a delivered send).
         * The client then exits while the others are mid-exchange on the same device: its
         * process leaves the shared port, which must lose nothing of theirs. */
        RPMA(rpma_conn_disconnect(s->conn));
        s->done = 1;
        acked++;
        printf("server: client %u's %d messages and slice verified\n", h.id, K);
        fflush(stdout);
    }
    CHECK(acked == nconn, "%u of %u clients acknowledged", acked, nconn);
    for (unsigned id = 0; id < nconn; id++)
        for (unsigned q = 0; q <= K; q++)
            CHECK(seen[id][q], "message (client %u, seq %u) never came", id, q);
    /* the spare buffers stay untouched, and no completion is left over */
    unsigned used = 0;
    for (unsigned i = 0; i < nslots; i++) {
        if (slot_used[i]) { used++; continue; }
        for (size_t b = 0; b < SLOT_SIZE; b++)
            CHECK(slots[(size_t)i * SLOT_SIZE + b] == 0xEE, "unused buffer %u was written", i);
    }
    CHECK(used == total_msgs, "%u buffers used for %u messages", used, total_msgs);
    {
        struct ibv_wc extra;
        int ret = rpma_cq_get_wc(rcq, 1, &extra, NULL);
        CHECK(ret == RPMA_E_NO_COMPLETION, "the shared receive CQ has an extra completion "
              "(ret %d, wr_id %#llx, status %d)", ret, (unsigned long long)extra.wr_id,
              extra.status);
    }
    /* the whole region: every slice as its client left it */
    for (unsigned id = 0; id < nconn; id++) {
        size_t bad = slice_bad(region + (size_t)id * SLICE, id, (size_t)id * SLICE);
        CHECK(!bad, "client %u's slice changed after it was verified (offset %zu)", id,
              bad - 1);
    }

    /* each connection was disconnected: wait for it to close, then delete */
    for (unsigned c = 0; c < nconn; c++) {
        char what[64];
        snprintf(what, sizeof what, "client %u's connection closed", sc[c].id);
        expect_conn_event(sc[c].conn, sc[c].ev_fd, RPMA_CONN_CLOSED, what);
        RPMA(rpma_conn_delete(&sc[c].conn));
        CHECK(sc[c].conn == NULL, "rpma_conn_delete did not clear the pointer");
    }
    RPMA(rpma_conn_cfg_delete(&cfg));
    RPMA(rpma_srq_delete(&srq));
    RPMA(rpma_mr_dereg(&acks_mr));
    RPMA(rpma_mr_dereg(&slots_mr));
    RPMA(rpma_mr_dereg(&region_mr));
    RPMA(rpma_peer_delete(&peer));
    free(acks);
    free(slots);
    free(region);
    free(slot_ctx);
    free(slot_used);
    printf("server checks passed\n");
    return 0;
}

/* ================================ client ================================ */

/* op_contexts of the client's operations */
static int Ctx_send[K + 1], Ctx_write, Ctx_read1, Ctx_flush1, Ctx_atomic, Ctx_flush2, Ctx_read2,
           Ctx_recv;

static int client(const char *addr, const char *port, unsigned id) {
    struct ibv_context *dev = NULL;
    struct rpma_peer *peer = NULL;
    RPMA(rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &dev));
    RPMA(rpma_peer_new(dev, &peer));

    /* local memory: [0, WRITE_LEN) write source, [SLICE, 2 SLICE) read destination,
     * [2 SLICE, ...) the K + 1 messages, then the ack's receive buffer */
    enum { SRC = 0, DST = SLICE, MSGS = 2 * SLICE, ACK = 2 * SLICE + (K + 1) * SLOT_SIZE };
    size_t local_size = ACK + ACK_SIZE;
    uint8_t *local = page_alloc(local_size);
    memset(local, 0, local_size);
    for (size_t i = 0; i < WRITE_LEN; i++) local[SRC + i] = write_byte(id, i);
    for (unsigned q = 0; q <= K; q++) {
        uint8_t *m = local + MSGS + q * SLOT_SIZE;
        struct msg_hdr h = { MSG_MAGIC, (uint16_t)id, (uint16_t)q,
                             (uint16_t)(q == K ? KIND_DONE : KIND_DATA), 0 };
        h.len = (uint16_t)msg_len(id, q);
        memcpy(m, &h, sizeof h);
        for (size_t i = sizeof h; i < h.len; i++) m[i] = msg_byte(id, q, i);
    }
    struct rpma_mr_local *mr = NULL;
    RPMA(rpma_mr_reg(peer, local, local_size,
                     RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_SEND |
                     RPMA_MR_USAGE_RECV, &mr));

    struct rpma_conn_cfg *cfg = NULL;
    RPMA(rpma_conn_cfg_new(&cfg));
    RPMA(rpma_conn_cfg_set_sq_size(cfg, 16));
    RPMA(rpma_conn_cfg_set_rq_size(cfg, 4));
    RPMA(rpma_conn_cfg_set_cq_size(cfg, 32));
    RPMA(rpma_conn_cfg_set_timeout(cfg, 5000));

    /* connect; the server may not listen yet (started just before): retry, bounded */
    struct client_pdata cpd = { PDATA_MAGIC, id };
    struct rpma_conn_private_data out = { .ptr = &cpd, .len = sizeof cpd };
    struct rpma_conn *conn = NULL;
    int ev_fd = -1;
    long long give_up = now_ms() + WAIT_MS;
    for (int attempt = 1;; attempt++) {
        struct rpma_conn_req *req = NULL;
        RPMA(rpma_conn_req_new(peer, addr, port, cfg, &req));
        /* the ack's buffer, posted before the connection exists */
        RPMA(rpma_conn_req_recv(req, mr, ACK, ACK_SIZE, &Ctx_recv));
        RPMA(rpma_conn_req_connect(&req, &out, &conn));
        RPMA(rpma_conn_get_event_fd(conn, &ev_fd));
        set_nonblock(ev_fd, "connection event");
        enum rpma_conn_event ev = next_conn_event(conn, ev_fd, "the connection established");
        if (ev == RPMA_CONN_ESTABLISHED) break;
        CHECK((ev == RPMA_CONN_REJECTED || ev == RPMA_CONN_UNREACHABLE) && now_ms() < give_up,
              "connect attempt %d: event %s", attempt, rpma_utils_conn_event_2str(ev));
        RPMA(rpma_conn_delete(&conn));
        usleep(100 * 1000);
    }

    /* the server's region */
    struct rpma_conn_private_data pd = { 0 };
    RPMA(rpma_conn_get_private_data(conn, &pd));
    CHECK(pd.ptr && pd.len >= offsetof(struct server_pdata, desc),
          "accept private data: %p, %u bytes", pd.ptr, pd.len);
    struct server_pdata spd;
    memset(&spd, 0, sizeof spd);
    memcpy(&spd, pd.ptr, pd.len < sizeof spd ? pd.len : sizeof spd);
    CHECK(spd.magic == PDATA_MAGIC && id < spd.nconn && spd.nconn <= MAX_CONN,
          "accept private data: magic %#x, nconn %u (my id %u)", spd.magic, spd.nconn, id);
    CHECK(spd.desc_size > 0 && offsetof(struct server_pdata, desc) + spd.desc_size <= pd.len,
          "accept private data: %u bytes, descriptor of %u bytes does not fit", pd.len,
          spd.desc_size);
    struct rpma_mr_remote *remote = NULL;
    RPMA(rpma_mr_remote_from_descriptor(spd.desc, spd.desc_size, &remote));
    size_t rsize = 0;
    RPMA(rpma_mr_remote_get_size(remote, &rsize));
    CHECK(rsize == (size_t)spd.nconn * SLICE, "remote region size %zu, expected %zu", rsize,
          (size_t)spd.nconn * SLICE);
    int flush_type = 0;
    RPMA(rpma_mr_remote_get_flush_type(remote, &flush_type));
    CHECK(flush_type == RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
          "remote flush types %#x, expected VISIBILITY only (%#x)", flush_type,
          RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY);

    struct rpma_cq *cq = NULL, *rcq = (struct rpma_cq *)1;
    int cq_fd = -1;
    RPMA(rpma_conn_get_cq(conn, &cq));
    RPMA(rpma_conn_get_rcq(conn, &rcq));
    CHECK(rcq == NULL, "a receive CQ exists though rcq_size is 0");
    RPMA(rpma_cq_get_fd(cq, &cq_fd));
    set_nonblock(cq_fd, "connection CQ");
    uint32_t qp_num = 0;
    RPMA(rpma_conn_get_qp_num(conn, &qp_num));
    struct ibv_wc wc;

    /* 1. K messages into the server's shared RQ */
    for (unsigned q = 0; q < K; q++)
        RPMA(rpma_send(conn, mr, MSGS + q * SLOT_SIZE, msg_len(id, q), RPMA_F_COMPLETION_ALWAYS,
                       &Ctx_send[q]));
    for (unsigned q = 0; q < K; q++) {
        next_wc(cq, cq_fd, &wc, "a send completion");
        check_wc(&wc, &Ctx_send[q], IBV_WC_SEND, IBV_WC_SEND, "send");
        CHECK(wc.qp_num == qp_num, "send: qp_num %u, mine is %u", wc.qp_num, qp_num);
    }

    /* 2. write the slice, read it back */
    size_t base = (size_t)id * SLICE;
    RPMA(rpma_write(conn, remote, base, mr, SRC, WRITE_LEN, RPMA_F_COMPLETION_ALWAYS,
                    &Ctx_write));
    next_wc(cq, cq_fd, &wc, "the write's completion");
    check_wc(&wc, &Ctx_write, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE, "rpma_write");
    RPMA(rpma_read(conn, mr, DST, remote, base, WRITE_LEN, RPMA_F_COMPLETION_ALWAYS,
                   &Ctx_read1));
    next_wc(cq, cq_fd, &wc, "the read's completion");
    check_wc(&wc, &Ctx_read1, IBV_WC_RDMA_READ, IBV_WC_RDMA_READ, "rpma_read");
    CHECK(memcmp(local + DST, local + SRC, WRITE_LEN) == 0,
          "rpma_read gave back other bytes than rpma_write wrote");

    /* 3. flush: PERSISTENT is refused (DRAM region, no direct write to pmem), VISIBILITY works
     * (librpma 1.2 implements it as an 8-byte RDMA read: the completion is IBV_WC_RDMA_READ) */
    Expected_error = 1;
    int ret = rpma_flush(conn, remote, base, WRITE_LEN, RPMA_FLUSH_TYPE_PERSISTENT,
                         RPMA_F_COMPLETION_ALWAYS, &Ctx_flush1);
    Expected_error = 0;
    CHECK(ret == RPMA_E_NOSUPP, "rpma_flush(PERSISTENT) on a VISIBILITY-only region: %d (%s), "
          "expected RPMA_E_NOSUPP", ret, rpma_err_2str(ret));
    RPMA(rpma_flush(conn, remote, base, WRITE_LEN, RPMA_FLUSH_TYPE_VISIBILITY,
                    RPMA_F_COMPLETION_ALWAYS, &Ctx_flush1));
    next_wc(cq, cq_fd, &wc, "the flush's completion");
    check_wc(&wc, &Ctx_flush1, IBV_WC_RDMA_READ, IBV_WC_RDMA_READ, "rpma_flush");

    /* 4. the atomic 8-byte write (librpma 1.2 as Debian builds it posts an inline, fenced
     * RDMA write; a native atomic write would complete as IBV_WC_ATOMIC_WRITE), flushed */
    char av[8];
    atomic_value(id, av);
    Expected_error = 1;
    ret = rpma_atomic_write(conn, remote, base + ATOMIC_OFF + 4, av, RPMA_F_COMPLETION_ALWAYS,
                            &Ctx_atomic);
    Expected_error = 0;
    CHECK(ret == RPMA_E_INVAL, "rpma_atomic_write to a misaligned offset: %d (%s), expected "
          "RPMA_E_INVAL", ret, rpma_err_2str(ret));
    RPMA(rpma_atomic_write(conn, remote, base + ATOMIC_OFF, av, RPMA_F_COMPLETION_ALWAYS,
                           &Ctx_atomic));
    RPMA(rpma_flush(conn, remote, base + ATOMIC_OFF, 8, RPMA_FLUSH_TYPE_VISIBILITY,
                    RPMA_F_COMPLETION_ALWAYS, &Ctx_flush2));
    next_wc(cq, cq_fd, &wc, "the atomic write's completion");
    check_wc(&wc, &Ctx_atomic, IBV_WC_RDMA_WRITE, IBV_WC_ATOMIC_WRITE, "rpma_atomic_write");
    next_wc(cq, cq_fd, &wc, "the second flush's completion");
    check_wc(&wc, &Ctx_flush2, IBV_WC_RDMA_READ, IBV_WC_RDMA_READ, "rpma_flush (atomic)");

    /* 5. the whole slice back: my write, the server's bytes around it, the atomic word */
    memset(local + DST, 0, SLICE);
    RPMA(rpma_read(conn, mr, DST, remote, base, SLICE, RPMA_F_COMPLETION_ALWAYS, &Ctx_read2));
    next_wc(cq, cq_fd, &wc, "the slice read's completion");
    check_wc(&wc, &Ctx_read2, IBV_WC_RDMA_READ, IBV_WC_RDMA_READ, "rpma_read (slice)");
    size_t bad = slice_bad(local + DST, id, base);
    CHECK(!bad, "slice read back: byte %zu is %#x", bad - 1, local[DST + bad - 1]);

    /* 6. DONE, then the server's acknowledgement. Both complete on the one CQ, usually the
     * send first (its ACK leaves the server before the answer), but the verbs do not order a
     * send's completion against a receive's: a lost ACK completes the send only when its
     * retry is answered. */
    RPMA(rpma_send(conn, mr, MSGS + K * SLOT_SIZE, msg_len(id, K), RPMA_F_COMPLETION_ALWAYS,
                   &Ctx_send[K]));
    struct ibv_wc first;
    next_wc(cq, cq_fd, &first, "the DONE send's or the acknowledgement's completion");
    int send_first = first.wr_id == (uint64_t)(uintptr_t)&Ctx_send[K];
    next_wc(cq, cq_fd, &wc, send_first ? "the server's acknowledgement"
                                       : "the DONE send's completion");
    struct ibv_wc send_wc = send_first ? first : wc;
    if (!send_first) {
        wc = first;
        printf("client %u: the acknowledgement completed before the DONE send\n", id);
    }
    check_wc(&send_wc, &Ctx_send[K], IBV_WC_SEND, IBV_WC_SEND, "send (DONE)");
    check_wc(&wc, &Ctx_recv, IBV_WC_RECV, IBV_WC_RECV, "receive (ack)");
    CHECK(wc.byte_len == sizeof(struct ack), "ack: byte_len %u, expected %zu", wc.byte_len,
          sizeof(struct ack));
    CHECK(wc.qp_num == qp_num, "ack: qp_num %u, mine is %u", wc.qp_num, qp_num);
    struct ack a;
    memcpy(&a, local + ACK, sizeof a);
    char want[sizeof a.text];
    snprintf(want, sizeof want, "slice %u ok", id);
    CHECK(a.magic == MSG_MAGIC && a.id == id && strncmp(a.text, want, sizeof want) == 0,
          "ack: magic %#x id %u text \"%.*s\"", a.magic, a.id, (int)sizeof a.text, a.text);
    {
        struct ibv_wc extra;
        ret = rpma_cq_get_wc(cq, 1, &extra, NULL);
        CHECK(ret == RPMA_E_NO_COMPLETION, "an extra completion (ret %d, wr_id %#llx, "
              "opcode %d)", ret, (unsigned long long)extra.wr_id, extra.opcode);
    }

    /* 7. the server disconnects once its acknowledgement completed; then ours */
    expect_conn_event(conn, ev_fd, RPMA_CONN_CLOSED, "the server's disconnect");
    RPMA(rpma_conn_disconnect(conn));
    RPMA(rpma_conn_delete(&conn));
    RPMA(rpma_mr_remote_delete(&remote));
    RPMA(rpma_conn_cfg_delete(&cfg));
    RPMA(rpma_mr_dereg(&mr));
    RPMA(rpma_peer_delete(&peer));
    free(local);
    printf("client %u checks passed\n", id);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
        fprintf(stderr, "usage: %s server ADDR PORT NCONN | client ADDR PORT ID\n", argv[0]);
        return 2;
    }
    char *end;
    unsigned long n = strtoul(argv[4], &end, 10);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(argv[1], "server")) {
        snprintf(Role, sizeof Role, "server");
        CHECK(*end == 0 && n >= 1 && n <= MAX_CONN, "NCONN must be 1..%d", MAX_CONN);
        setup_log();
        return server(argv[2], argv[3], (unsigned)n);
    }
    snprintf(Role, sizeof Role, "client %lu", n);
    CHECK(*end == 0 && n < MAX_CONN, "ID must be 0..%d", MAX_CONN - 1);
    setup_log();
    return client(argv[2], argv[3], (unsigned)n);
}
