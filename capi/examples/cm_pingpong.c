/*
 * cm_pingpong: both ends of an RDMA connection in one process, through librdmacm and
 * libibverbs. A listener and a client id share one event channel, whose fd the program
 * poll()s; each side gets a PD, a completion channel, a CQ, an RC QP and a registered buffer.
 * The client sends its buffer's address and rkey; the server, woken through its completion
 * channel's fd, RDMA-WRITEs a greeting into that buffer and SENDs a notice; the client
 * busy-polls its CQ for the notice and prints what the server wrote; then both disconnect.
 *
 * Builds against rdma-core's headers and against this project's (capi/include); the tests
 * compile it with cc both ways and run it on this stack. Prints "ok" and exits 0 on success.
 * Usage: cm_pingpong [ADDRESS [PORT]] (default 127.0.0.1 7999).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define BUF 64

struct end {
	const char *name;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[BUF];
	char rbuf[BUF];
	struct ibv_mr *rmr;
};

struct advert {
	uint64_t addr;
	uint32_t rkey;
};

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int n = poll(&p, 1, 20000);

	if (n != 1)
		FAIL("poll on the event channel's fd: %d (%s)", n, strerror(errno));
	if (rdma_get_cm_event(ch, &ev))
		FAIL("rdma_get_cm_event: %s", strerror(errno));
	return ev;
}

static void setup(struct end *e, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a;
	struct ibv_sge sge;
	struct ibv_recv_wr wr, *bad;

	e->id = id;
	e->pd = ibv_alloc_pd(id->verbs);
	if (!e->pd)
		FAIL("%s: ibv_alloc_pd: %s", e->name, strerror(errno));
	e->cc = ibv_create_comp_channel(id->verbs);
	if (!e->cc)
		FAIL("%s: ibv_create_comp_channel: %s", e->name, strerror(errno));
	e->cq = ibv_create_cq(id->verbs, 16, e, e->cc, 0);
	if (!e->cq)
		FAIL("%s: ibv_create_cq: %s", e->name, strerror(errno));
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	e->rmr = ibv_reg_mr(e->pd, e->rbuf, BUF, IBV_ACCESS_LOCAL_WRITE);
	if (!e->mr || !e->rmr)
		FAIL("%s: ibv_reg_mr: %s", e->name, strerror(errno));
	memset(&a, 0, sizeof(a));
	a.send_cq = e->cq;
	a.recv_cq = e->cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = 4;
	a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.sq_sig_all = 1;
	if (rdma_create_qp(id, e->pd, &a))
		FAIL("%s: rdma_create_qp: %s", e->name, strerror(errno));
	/* a receive posted before the connection exists survives it */
	sge.addr = (uintptr_t)e->rbuf;
	sge.length = BUF;
	sge.lkey = e->rmr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	if (ibv_post_recv(id->qp, &wr, &bad))
		FAIL("%s: ibv_post_recv", e->name);

	/* O_NONBLOCK on the completion channel's fd: nothing completed, EAGAIN */
	struct ibv_cq *ecq;
	void *ectx;
	int fl = fcntl(e->cc->fd, F_GETFL);
	fcntl(e->cc->fd, F_SETFL, fl | O_NONBLOCK);
	int r = ibv_get_cq_event(e->cc, &ecq, &ectx);
	printf("%s: nonblocking ibv_get_cq_event: %d %s\n", e->name, r, r ? strerror(errno) : "event");
	fcntl(e->cc->fd, F_SETFL, fl);
}

static void post(struct end *e, enum ibv_wr_opcode op, void *src, uint32_t len, uint64_t raddr,
		 uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = len, .lkey = e->mr->lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 2;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(e->id->qp, &wr, &bad))
		FAIL("%s: ibv_post_send", e->name);
}

/* Busy-polls one completion. */
static struct ibv_wc poll_one(struct end *e)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(e->cq, 1, &wc)) == 0)
		;
	if (n < 0)
		FAIL("%s: ibv_poll_cq: %d", e->name, n);
	if (wc.status != IBV_WC_SUCCESS)
		FAIL("%s: completion status %d", e->name, wc.status);
	return wc;
}

/* Sleeps on the completion channel's fd until the CQ has a completion, then polls it. */
static struct ibv_wc wait_one(struct end *e)
{
	struct ibv_wc wc;
	struct ibv_cq *cq;
	void *ctx;
	int n;

	for (;;) {
		n = ibv_poll_cq(e->cq, 1, &wc);
		if (n < 0)
			FAIL("%s: ibv_poll_cq: %d", e->name, n);
		if (n == 1)
			break;
		if (ibv_req_notify_cq(e->cq, 0))
			FAIL("%s: ibv_req_notify_cq", e->name);
		n = ibv_poll_cq(e->cq, 1, &wc);
		if (n == 1)
			break;
		struct pollfd p = { .fd = e->cc->fd, .events = POLLIN };
		if (poll(&p, 1, 20000) != 1)
			FAIL("%s: no completion event on the channel's fd", e->name);
		if (ibv_get_cq_event(e->cc, &cq, &ctx))
			FAIL("%s: ibv_get_cq_event: %s", e->name, strerror(errno));
		if (cq != e->cq || ctx != e)
			FAIL("%s: the event names another CQ", e->name);
		ibv_ack_cq_events(cq, 1);
	}
	if (wc.status != IBV_WC_SUCCESS)
		FAIL("%s: completion status %d", e->name, wc.status);
	return wc;
}

static void teardown(struct end *e)
{
	rdma_destroy_qp(e->id);
	if (ibv_dereg_mr(e->mr) || ibv_dereg_mr(e->rmr))
		FAIL("%s: ibv_dereg_mr", e->name);
	if (ibv_destroy_cq(e->cq))
		FAIL("%s: ibv_destroy_cq", e->name);
	if (ibv_destroy_comp_channel(e->cc))
		FAIL("%s: ibv_destroy_comp_channel", e->name);
	if (ibv_dealloc_pd(e->pd))
		FAIL("%s: ibv_dealloc_pd", e->name);
	if (rdma_destroy_id(e->id))
		FAIL("%s: rdma_destroy_id: %s", e->name, strerror(errno));
}

int main(int argc, char **argv)
{
	static struct end srv = { .name = "server" }, cli = { .name = "client" };
	struct sockaddr_in sin;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id, *cid;
	struct rdma_cm_event *ev;
	int established = 0, disconnected = 0;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(argc > 2 ? atoi(argv[2]) : 7999);
	if (inet_pton(AF_INET, argc > 1 ? argv[1] : "127.0.0.1", &sin.sin_addr) != 1)
		FAIL("bad address");

	ch = rdma_create_event_channel();
	if (!ch)
		FAIL("rdma_create_event_channel: %s", strerror(errno));
	/* O_NONBLOCK on the channel's fd: no event yet, EAGAIN instead of a wait */
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	ev = NULL;
	int r = rdma_get_cm_event(ch, &ev);
	printf("nonblocking rdma_get_cm_event: %d %s\n", r, r ? strerror(errno) : "event");
	fcntl(ch->fd, F_SETFL, fl);
	if (rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_create_id(ch, &cid, &cli, RDMA_PS_TCP))
		FAIL("rdma_create_id: %s", strerror(errno));
	if (rdma_bind_addr(listen_id, (struct sockaddr *)&sin))
		FAIL("rdma_bind_addr: %s", strerror(errno));
	if (rdma_listen(listen_id, 1))
		FAIL("rdma_listen: %s", strerror(errno));
	if (rdma_resolve_addr(cid, NULL, (struct sockaddr *)&sin, 2000))
		FAIL("rdma_resolve_addr: %s", strerror(errno));

	while (established < 2) {
		ev = next_event(ch);
		printf("event: %s\n", rdma_event_str(ev->event));
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(ev->id, 2000))
				FAIL("rdma_resolve_route: %s", strerror(errno));
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			setup(&cli, ev->id);
			if (rdma_connect(ev->id, NULL))
				FAIL("rdma_connect: %s", strerror(errno));
			break;
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			if (ev->listen_id != listen_id)
				FAIL("connect request not from the listener");
			setup(&srv, ev->id);
			if (rdma_accept(ev->id, NULL))
				FAIL("rdma_accept: %s", strerror(errno));
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			established++;
			break;
		default:
			FAIL("unexpected event %s (status %d)", rdma_event_str(ev->event), ev->status);
		}
		rdma_ack_cm_event(ev);
	}

	/* The client advertises its buffer. */
	struct advert ad = { .addr = (uintptr_t)cli.buf, .rkey = cli.mr->rkey };
	memcpy(cli.buf, &ad, sizeof(ad));
	post(&cli, IBV_WR_SEND, cli.buf, sizeof(ad), 0, 0);
	poll_one(&cli);

	/* The server sleeps until the advert arrives, writes into the client's buffer. */
	struct ibv_wc wc = wait_one(&srv);
	if (wc.opcode != IBV_WC_RECV || wc.byte_len != sizeof(ad))
		FAIL("server: opcode %d, %u bytes", wc.opcode, wc.byte_len);
	memcpy(&ad, srv.rbuf, sizeof(ad));
	printf("server: client buffer rkey 0x%x\n", ad.rkey == cli.mr->rkey ? 1 : 0);
	snprintf(srv.buf, BUF, "written by the server");
	post(&srv, IBV_WR_RDMA_WRITE, srv.buf, strlen(srv.buf) + 1, ad.addr, ad.rkey);
	wait_one(&srv);
	snprintf(srv.buf, BUF, "done");
	post(&srv, IBV_WR_SEND, srv.buf, 5, 0, 0);
	wait_one(&srv);

	wc = poll_one(&cli);
	if (wc.opcode != IBV_WC_RECV)
		FAIL("client: opcode %d", wc.opcode);
	printf("client: notice: %s\n", cli.rbuf);
	printf("client: buffer: %s\n", cli.buf);

	if (rdma_disconnect(cli.id))
		FAIL("rdma_disconnect: %s", strerror(errno));
	while (disconnected < 2) {
		ev = next_event(ch);
		printf("event: %s (%s)\n", rdma_event_str(ev->event),
		       ev->id == cli.id ? "client" : "server");
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED) {
			disconnected++;
			/* the passive side answers the peer's disconnect (its DREP) */
			if (ev->id == srv.id && rdma_disconnect(srv.id))
				FAIL("rdma_disconnect: %s", strerror(errno));
		}
		else if (ev->event != RDMA_CM_EVENT_TIMEWAIT_EXIT)
			FAIL("unexpected event %s", rdma_event_str(ev->event));
		rdma_ack_cm_event(ev);
	}
	printf("disconnected\n");
	teardown(&cli);
	teardown(&srv);
	if (rdma_destroy_id(listen_id))
		FAIL("rdma_destroy_id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
