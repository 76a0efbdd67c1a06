/* The seed man pages of librdmacm as a program of the project's own, on the drop-in:
 * rdma_post_recvv (one message scattered over several SGEs), rdma_post_send with a
 * registered MR and without one (IBV_SEND_INLINE), rdma_post_write into a buffer whose
 * address and rkey came in the accept's private data. Synchronous endpoints
 * (rdma_getaddrinfo + rdma_create_ep), completions through rdma_get_send_comp /
 * rdma_get_recv_comp (the CQs and channels rdma_create_ep made).
 *
 *   rdmacm_seed server ADDR PORT
 *   rdmacm_seed client ADDR PORT SRC
 * Each side checks every byte and completion field it can see and prints
 * "<role> checks passed" on success; any failure exits 1 with the reason. */
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)

struct advert { uint64_t addr; uint32_t rkey; uint32_t len; };

enum { SCATTER_LEN = 32, INLINE_LEN = 40, WRITE_LEN = 4096 };

static void fill(uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed + i * 7);
}

static int same(const uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) if (p[i] != (uint8_t)(seed + i * 7)) return 0;
    return 1;
}

static struct ibv_qp_init_attr qp_attr(void) {
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.cap.max_send_wr = a.cap.max_recv_wr = 8;
    a.cap.max_send_sge = a.cap.max_recv_sge = 4;
    a.cap.max_inline_data = 64;
    a.qp_type = IBV_QPT_RC;
    return a;
}

static void recv_comp(struct rdma_cm_id *id, uint64_t wr_id, uint32_t len) {
    struct ibv_wc wc;
    CHECK(rdma_get_recv_comp(id, &wc) == 1, "rdma_get_recv_comp failed");
    CHECK(wc.status == IBV_WC_SUCCESS, "receive status %d", wc.status);
    CHECK(wc.wr_id == wr_id, "receive wr_id %#llx, expected %#llx",
          (unsigned long long)wc.wr_id, (unsigned long long)wr_id);
    CHECK(wc.opcode == IBV_WC_RECV, "receive opcode %d", wc.opcode);
    CHECK(wc.byte_len == len, "receive byte_len %u, expected %u", wc.byte_len, len);
}

static void send_comp(struct rdma_cm_id *id, uint64_t wr_id, enum ibv_wc_opcode op) {
    struct ibv_wc wc;
    CHECK(rdma_get_send_comp(id, &wc) == 1, "rdma_get_send_comp failed");
    CHECK(wc.status == IBV_WC_SUCCESS, "send status %d (%s)", wc.status,
          ibv_wc_status_str(wc.status));
    CHECK(wc.wr_id == wr_id, "send wr_id %#llx", (unsigned long long)wc.wr_id);
    CHECK(wc.opcode == op, "send opcode %d, expected %d", wc.opcode, op);
}

static int server(const char *addr, const char *port) {
    struct rdma_addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_flags = RAI_PASSIVE;
    hints.ai_port_space = RDMA_PS_TCP;
    CHECK(rdma_getaddrinfo(addr, port, &hints, &res) == 0, "rdma_getaddrinfo");
    struct ibv_qp_init_attr attr = qp_attr();
    struct rdma_cm_id *listen_id, *id;
    CHECK(rdma_create_ep(&listen_id, res, NULL, &attr) == 0, "rdma_create_ep: %m");
    CHECK(rdma_listen(listen_id, 1) == 0, "rdma_listen: %m");
    printf("server listening\n");
    fflush(stdout);
    CHECK(rdma_get_request(listen_id, &id) == 0, "rdma_get_request: %m");
    CHECK(id->qp && id->pd && id->recv_cq && id->send_cq, "the request's id has no QP");
    CHECK(id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST, "no request event");
    CHECK(id->event->param.conn.private_data_len >= 6 &&
          memcmp(id->event->param.conn.private_data, "hello", 6) == 0,
          "the REQ's private data did not arrive");

    /* rdma_post_recvv: one message over three SGEs of two MRs. */
    static uint8_t a[5], b[7], c[64], inl[64], done[16];
    static uint8_t target[WRITE_LEN];
    struct ibv_mr *ma = rdma_reg_msgs(id, a, sizeof a);
    struct ibv_mr *mbc = rdma_reg_msgs(id, b, sizeof b);
    struct ibv_mr *mc = rdma_reg_msgs(id, c, sizeof c);
    struct ibv_mr *mi = rdma_reg_msgs(id, inl, sizeof inl);
    struct ibv_mr *md = rdma_reg_msgs(id, done, sizeof done);
    struct ibv_mr *mt = rdma_reg_write(id, target, sizeof target);
    CHECK(ma && mbc && mc && mi && md && mt, "rdma_reg_*: %m");
    struct ibv_sge sge[3] = {
        { (uintptr_t)a, sizeof a, ma->lkey },
        { (uintptr_t)b, sizeof b, mbc->lkey },
        { (uintptr_t)c, sizeof c, mc->lkey },
    };
    CHECK(rdma_post_recvv(id, (void *)0x1111, sge, 3) == 0, "rdma_post_recvv: %m");
    CHECK(rdma_post_recv(id, (void *)0x2222, inl, sizeof inl, mi) == 0, "rdma_post_recv");
    CHECK(rdma_post_recv(id, (void *)0x3333, done, sizeof done, md) == 0, "rdma_post_recv");

    struct advert adv = { (uintptr_t)target, mt->rkey, WRITE_LEN };
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof cp);
    cp.private_data = &adv;
    cp.private_data_len = sizeof adv;
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    cp.rnr_retry_count = 7;
    CHECK(rdma_accept(id, &cp) == 0, "rdma_accept: %m");

    recv_comp(id, 0x1111, SCATTER_LEN);
    uint8_t joined[SCATTER_LEN];
    memcpy(joined, a, 5);
    memcpy(joined + 5, b, 7);
    memcpy(joined + 12, c, SCATTER_LEN - 12);
    CHECK(same(joined, SCATTER_LEN, 11), "the scattered message is wrong");
    recv_comp(id, 0x2222, INLINE_LEN);
    CHECK(same(inl, INLINE_LEN, 22), "the inline message is wrong");
    recv_comp(id, 0x3333, 5);
    CHECK(memcmp(done, "done", 5) == 0, "no done message");
    CHECK(same(target, WRITE_LEN, 33), "the RDMA WRITE did not land in the advertised buffer");

    rdma_disconnect(id);
    rdma_dereg_mr(ma); rdma_dereg_mr(mbc); rdma_dereg_mr(mc);
    rdma_dereg_mr(mi); rdma_dereg_mr(md); rdma_dereg_mr(mt);
    rdma_destroy_ep(id);
    rdma_destroy_ep(listen_id);
    rdma_freeaddrinfo(res);
    printf("server checks passed\n");
    return 0;
}

static int client(const char *addr, const char *port, const char *src) {
    struct rdma_addrinfo hints, *res, *src_res;
    memset(&hints, 0, sizeof hints);
    hints.ai_flags = RAI_PASSIVE;
    CHECK(rdma_getaddrinfo(src, NULL, &hints, &src_res) == 0, "rdma_getaddrinfo(src)");
    memset(&hints, 0, sizeof hints);
    hints.ai_port_space = RDMA_PS_TCP;
    hints.ai_src_addr = src_res->ai_src_addr;
    hints.ai_src_len = src_res->ai_src_len;
    CHECK(rdma_getaddrinfo(addr, port, &hints, &res) == 0, "rdma_getaddrinfo");
    struct ibv_qp_init_attr attr = qp_attr();
    struct rdma_cm_id *id;
    CHECK(rdma_create_ep(&id, res, NULL, &attr) == 0, "rdma_create_ep: %m");
    CHECK(attr.cap.max_inline_data >= INLINE_LEN, "max_inline_data %u", attr.cap.max_inline_data);
    /* The device says it executes FLUSH (global, persistent) and ATOMIC WRITE, as rxe:
     * the kernel's IB_UVERBS_DEVICE_* bits 38-40 of device_cap_flags_ex. */
    struct ibv_device_attr_ex dx;
    CHECK(ibv_query_device_ex(id->verbs, NULL, &dx) == 0, "ibv_query_device_ex");
    CHECK(((dx.device_cap_flags_ex >> 38) & 7) == 7, "device_cap_flags_ex %#llx",
          (unsigned long long)dx.device_cap_flags_ex);
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof cp);
    cp.private_data = "hello";
    cp.private_data_len = 6;
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %m");
    CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED, "not established");
    CHECK(id->event->param.conn.private_data_len >= sizeof(struct advert),
          "the accept's private data is %u bytes", id->event->param.conn.private_data_len);
    struct advert adv;
    memcpy(&adv, id->event->param.conn.private_data, sizeof adv);
    CHECK(adv.len == WRITE_LEN, "advertised length %u", adv.len);

    /* rdma_post_send from a registered buffer. */
    static uint8_t msg[SCATTER_LEN], wsrc[WRITE_LEN];
    struct ibv_mr *mm = rdma_reg_msgs(id, msg, sizeof msg);
    struct ibv_mr *mw = rdma_reg_msgs(id, wsrc, sizeof wsrc);
    CHECK(mm && mw, "rdma_reg_msgs: %m");
    fill(msg, SCATTER_LEN, 11);
    CHECK(rdma_post_send(id, (void *)0xa1, msg, SCATTER_LEN, mm, IBV_SEND_SIGNALED) == 0,
          "rdma_post_send: %m");
    send_comp(id, 0xa1, IBV_WC_SEND);

    /* rdma_post_send without an MR: inline data from unregistered (stack) memory. */
    uint8_t inl[INLINE_LEN];
    fill(inl, INLINE_LEN, 22);
    CHECK(rdma_post_send(id, (void *)0xa2, inl, INLINE_LEN, NULL,
                         IBV_SEND_INLINE | IBV_SEND_SIGNALED) == 0, "inline rdma_post_send: %m");
    memset(inl, 0, sizeof inl); /* the data was taken at post time */
    send_comp(id, 0xa2, IBV_WC_SEND);

    /* rdma_post_write into the advertised buffer. */
    fill(wsrc, WRITE_LEN, 33);
    CHECK(rdma_post_write(id, (void *)0xa3, wsrc, WRITE_LEN, mw, IBV_SEND_SIGNALED,
                          adv.addr, adv.rkey) == 0, "rdma_post_write: %m");
    send_comp(id, 0xa3, IBV_WC_RDMA_WRITE);
    CHECK(rdma_post_send(id, (void *)0xa4, "done", 5, NULL,
                         IBV_SEND_INLINE | IBV_SEND_SIGNALED) == 0, "rdma_post_send done");
    send_comp(id, 0xa4, IBV_WC_SEND);

    /* The server disconnects once it has checked everything. */
    struct rdma_cm_event *e;
    (void)e;
    rdma_disconnect(id);
    rdma_dereg_mr(mm);
    rdma_dereg_mr(mw);
    rdma_destroy_ep(id);
    rdma_freeaddrinfo(res);
    rdma_freeaddrinfo(src_res);
    printf("client checks passed\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "server") == 0) return server(argv[2], argv[3]);
    if (argc == 5 && strcmp(argv[1], "client") == 0) return client(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: rdmacm_seed server ADDR PORT | client ADDR PORT SRC\n");
    return 2;
}
