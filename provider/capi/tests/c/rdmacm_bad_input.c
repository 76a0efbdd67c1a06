/* Bad input to the drop-in librdmacm: every call must fail with -1 and the errno
 * librdmacm gives (or report the failure in the event librdmacm reports it in), never
 * crash or hang. Run on two emulated devices, DEV0 and DEV1 (their addresses), with
 * NODEV an address of the test's loopback range that no device has.
 *
 *   rdmacm_bad_input DEV0 DEV1 NODEV PORT
 * Prints "rdmacm bad input: N checks passed". */
#include <errno.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks;
#define FAIL(...) do { fprintf(stderr, "line %d: ", __LINE__); fprintf(stderr, __VA_ARGS__); \
                       fprintf(stderr, "\n"); exit(1); } while (0)
#define EXPECT_ERR(call, err) do { errno = 0; int rc_ = (call); \
    if (rc_ != -1 || errno != (err)) FAIL("%s: rc %d errno %d (%s), expected -1 errno %d", \
        #call, rc_, errno, strerror(errno), (err)); checks++; } while (0)
#define EXPECT_OK(call) do { int rc_ = (call); if (rc_ != 0) FAIL("%s: rc %d errno %d (%s)", \
    #call, rc_, errno, strerror(errno)); checks++; } while (0)

static struct sockaddr_in addr(const char *ip, int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) FAIL("bad address %s", ip);
    return a;
}

static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want) {
    struct rdma_cm_event *e;
    if (rdma_get_cm_event(ch, &e)) FAIL("rdma_get_cm_event: %m");
    if (e->event != want) FAIL("event %s (status %d), expected %s", rdma_event_str(e->event),
                               e->status, rdma_event_str(want));
    checks++;
    return e;
}

int main(int argc, char **argv) {
    if (argc != 5) FAIL("usage: rdmacm_bad_input DEV0 DEV1 NODEV PORT");
    int port = atoi(argv[4]);
    struct sockaddr_in dev0 = addr(argv[1], port), dev1 = addr(argv[2], 0);
    struct sockaddr_in nodev = addr(argv[3], port);
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (!ch) FAIL("rdma_create_event_channel: %m");
    struct rdma_cm_id *id, *other;

    /* NULL and unknown arguments. */
    EXPECT_ERR(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL);
    EXPECT_ERR(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x4242), EINVAL);
    EXPECT_ERR(rdma_get_cm_event(ch, NULL), EINVAL);
    struct rdma_addrinfo *res;
    EXPECT_ERR(rdma_getaddrinfo(NULL, NULL, NULL, &res), EINVAL);

    /* Calls out of order, on a fresh id. */
    EXPECT_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
    EXPECT_ERR(rdma_listen(id, 1), EINVAL);
    EXPECT_ERR(rdma_connect(id, NULL), EINVAL);
    EXPECT_ERR(rdma_accept(id, NULL), EINVAL);
    EXPECT_ERR(rdma_resolve_route(id, 1000), EINVAL);
    EXPECT_ERR(rdma_disconnect(id), EINVAL);
    EXPECT_ERR(rdma_resolve_addr(id, NULL, NULL, 1000), EINVAL);
    EXPECT_ERR(rdma_bind_addr(id, (struct sockaddr *)&nodev), EADDRNOTAVAIL);
    EXPECT_ERR(rdma_join_multicast(id, (struct sockaddr *)&dev0, NULL), EINVAL); /* not bound */

    /* A port taken twice. */
    EXPECT_OK(rdma_bind_addr(id, (struct sockaddr *)&dev0));
    EXPECT_OK(rdma_create_id(ch, &other, NULL, RDMA_PS_TCP));
    EXPECT_ERR(rdma_bind_addr(other, (struct sockaddr *)&dev0), EADDRINUSE);
    EXPECT_ERR(rdma_bind_addr(id, (struct sockaddr *)&dev0), EINVAL); /* bound already */
    EXPECT_OK(rdma_destroy_id(other));
    EXPECT_OK(rdma_listen(id, 1));
    EXPECT_ERR(rdma_accept(id, NULL), EINVAL); /* a listener is no request */

    /* Destroyed ids. */
    EXPECT_OK(rdma_destroy_id(id));
    EXPECT_ERR(rdma_destroy_id(id), EINVAL);
    EXPECT_ERR(rdma_listen(id, 1), EINVAL);
    EXPECT_ERR(rdma_connect(id, NULL), EINVAL);
    EXPECT_ERR(rdma_resolve_route(id, 1000), EINVAL);
    EXPECT_ERR(rdma_migrate_id(id, ch), EINVAL);

    /* A destination no device has: ADDR_ERROR; an event acknowledged twice. */
    EXPECT_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
    EXPECT_OK(rdma_resolve_addr(id, (struct sockaddr *)&dev1, (struct sockaddr *)&nodev, 1000));
    struct rdma_cm_event *e = next(ch, RDMA_CM_EVENT_ADDR_ERROR);
    if (e->status != -EHOSTUNREACH) FAIL("ADDR_ERROR status %d", e->status);
    EXPECT_OK(rdma_ack_cm_event(e));
    EXPECT_ERR(rdma_ack_cm_event(e), EINVAL);
    EXPECT_OK(rdma_destroy_id(id));

    /* Nobody listens on the port: REJECTED with the kernel's reason 8 (invalid service ID). */
    struct sockaddr_in closed = addr(argv[1], port + 1);
    EXPECT_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
    EXPECT_OK(rdma_resolve_addr(id, (struct sockaddr *)&dev1, (struct sockaddr *)&closed, 1000));
    EXPECT_OK(rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED)));
    EXPECT_OK(rdma_resolve_route(id, 1000));
    EXPECT_OK(rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)));
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qa.qp_type = IBV_QPT_RC;
    EXPECT_OK(rdma_create_qp(id, NULL, &qa));
    EXPECT_ERR(rdma_create_qp(id, NULL, &qa), EINVAL); /* one QP per id */
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof cp);
    char big[57];
    memset(big, 'x', sizeof big);
    cp.private_data = big;
    cp.private_data_len = sizeof big; /* 56 at most after rdma_cm's header */
    EXPECT_ERR(rdma_connect(id, &cp), EINVAL);
    cp.private_data_len = 56;
    cp.responder_resources = 200; /* more than the device's max_qp_rd_atom */
    EXPECT_ERR(rdma_connect(id, &cp), EINVAL);
    cp.responder_resources = 1;
    EXPECT_OK(rdma_connect(id, &cp));
    e = next(ch, RDMA_CM_EVENT_REJECTED);
    if (e->status != 8) FAIL("REJECTED status %d, expected 8", e->status);
    EXPECT_OK(rdma_ack_cm_event(e));
    rdma_destroy_qp(id);
    EXPECT_OK(rdma_destroy_id(id));

    /* A synchronous id reports a failed resolution in its return value. */
    EXPECT_OK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP));
    EXPECT_ERR(rdma_resolve_addr(id, (struct sockaddr *)&dev1, (struct sockaddr *)&nodev, 1000),
               EHOSTUNREACH);
    EXPECT_OK(rdma_destroy_id(id));

    /* Multicast: malformed joins, a leave of what was never joined, a unicast "group"
     * (MULTICAST_ERROR: the QP's attach fails), and a real group's UD parameters. */
    struct sockaddr_in group = addr("239.22.44.9", 0);
    EXPECT_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP));
    EXPECT_ERR(rdma_leave_multicast(id, (struct sockaddr *)&group), EADDRNOTAVAIL);
    EXPECT_OK(rdma_bind_addr(id, (struct sockaddr *)&dev1));
    EXPECT_ERR(rdma_join_multicast(id, NULL, NULL), EINVAL);
    struct rdma_cm_join_mc_attr_ex mc;
    memset(&mc, 0, sizeof mc);
    mc.addr = (struct sockaddr *)&group;
    mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED;
    EXPECT_ERR(rdma_join_multicast_ex(id, &mc, NULL), ENOTSUP);
    mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS; /* no join flags */
    EXPECT_ERR(rdma_join_multicast_ex(id, &mc, NULL), EINVAL);
    mc.comp_mask |= RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
    mc.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
    EXPECT_ERR(rdma_join_multicast_ex(id, &mc, NULL), EINVAL);
    qa.qp_type = IBV_QPT_UD;
    EXPECT_OK(rdma_create_qp(id, NULL, &qa));
    EXPECT_OK(rdma_join_multicast(id, (struct sockaddr *)&dev0, (void *)0x1234));
    e = next(ch, RDMA_CM_EVENT_MULTICAST_ERROR);
    if (e->param.ud.private_data != (void *)0x1234) FAIL("MULTICAST_ERROR context");
    EXPECT_OK(rdma_ack_cm_event(e));
    EXPECT_OK(rdma_leave_multicast(id, (struct sockaddr *)&dev0));
    EXPECT_OK(rdma_join_multicast(id, (struct sockaddr *)&group, (void *)0x5678));
    e = next(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
    const struct rdma_ud_param *ud = &e->param.ud;
    static const unsigned char mgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 22, 44, 9};
    if (ud->private_data != (void *)0x5678 || ud->qp_num != 0xffffff || ud->qkey != RDMA_UDP_QKEY ||
        !ud->ah_attr.is_global || memcmp(ud->ah_attr.grh.dgid.raw, mgid, 16) != 0)
        FAIL("MULTICAST_JOIN parameters: context %p qpn %#x qkey %#x", ud->private_data,
             ud->qp_num, ud->qkey);
    EXPECT_OK(rdma_ack_cm_event(e));
    /* The QP is attached now: verbs refuse to destroy it, rdma_leave_multicast detaches. */
    if (ibv_destroy_qp(id->qp) != EBUSY) FAIL("ibv_destroy_qp of an attached QP");
    checks++;
    EXPECT_OK(rdma_leave_multicast(id, (struct sockaddr *)&group));
    EXPECT_ERR(rdma_leave_multicast(id, (struct sockaddr *)&group), EADDRNOTAVAIL);
    /* Joined and not left: rdma_destroy_qp detaches before it destroys. */
    EXPECT_OK(rdma_join_multicast(id, (struct sockaddr *)&group, NULL));
    EXPECT_OK(rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_MULTICAST_JOIN)));
    rdma_destroy_qp(id);
    EXPECT_OK(rdma_destroy_id(id));

    /* Unsupported entry points answer, never abort. */
    EXPECT_ERR(rsocket(AF_INET, SOCK_STREAM, 0), EOPNOTSUPP);
    errno = 0;
    if (rsend(3, "x", 1, 0) != -1 || errno != EOPNOTSUPP) FAIL("rsend");
    checks++;
    rdma_destroy_event_channel(ch);
    printf("rdmacm bad input: %d checks passed\n", checks);
    return 0;
}
