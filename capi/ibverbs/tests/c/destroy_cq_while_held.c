/*
 * The lifetime of a CQ against the completion events reported for it, as libibverbs defines
 * it. A thread holds a completion event (ibv_get_cq_event, not yet ibv_ack_cq_events) while
 * main destroys the CQ: ibv_destroy_cq returns only after the acknowledgement, so the
 * handler still sees a live CQ. An event still queued on the channel for a CQ being
 * destroyed is never reported afterwards. And ibv_destroy_comp_channel on a channel that
 * still has a CQ gives EBUSY.
 * Completions come from a QP moved to the error state with a receive posted (flushed).
 * Prints its findings; exits 1 on a failed call.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "rc_qp.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static struct ibv_comp_channel *ch;
static char buf[64];
static int marker;
static atomic_int taken, acked;

/* A CQ on the channel with a QP whose one posted receive completes (flushed) once armed. */
static struct ibv_cq *cq_with_event(struct ibv_qp **qp_out)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, &marker, ch, 0);
	if (!cq)
		FAIL("ibv_create_cq: %s", strerror(errno));
	struct ibv_qp *qp = rc_qp_in_init(pd, cq, 1);
	struct ibv_qp_attr a;
	int r;
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(buf), .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	if ((r = ibv_post_recv(qp, &wr, &bad)))
		FAIL("ibv_post_recv: %s", strerror(r));
	if ((r = ibv_req_notify_cq(cq, 0)))
		FAIL("ibv_req_notify_cq: %s", strerror(r));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE)))
		FAIL("ibv_modify_qp ERR: %s", strerror(r));
	*qp_out = qp;
	return cq;
}

/* Waits for the flushed completion, then destroys the QP (the CQ is then free of users). */
static void drain_and_destroy_qp(struct ibv_cq *cq, struct ibv_qp *qp)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		usleep(1000);
	if (n < 0)
		FAIL("ibv_poll_cq: %d", n);
	if (wc.status != IBV_WC_WR_FLUSH_ERR || wc.wr_id != 1)
		FAIL("completion: status %d wr_id %llu", wc.status, (unsigned long long)wc.wr_id);
	int r = ibv_destroy_qp(qp);
	if (r)
		FAIL("ibv_destroy_qp: %s", strerror(r));
}

static void *handler(void *arg)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	(void)arg;
	if (ibv_get_cq_event(ch, &cq, &cq_ctx))
		FAIL("ibv_get_cq_event: %s", strerror(errno));
	printf("handler: event for %s\n", cq_ctx == &marker ? "the CQ" : "another CQ");
	atomic_store(&taken, 1);
	/* Still handling the event when main destroys the CQ. */
	usleep(300000);
	printf("handler: cq context %s\n", cq->cq_context == &marker ? "intact" : "lost");
	atomic_store(&acked, 1);
	ibv_ack_cq_events(cq, 1);
	return NULL;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp *qp;
	struct ibv_cq *cq, *got;
	void *got_ctx;
	pthread_t t;
	int r;

	/* Each finding is out before a later step could crash. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!list || !list[0])
		FAIL("no device");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		FAIL("ibv_open_device: %s", strerror(errno));
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		FAIL("ibv_alloc_pd: %s", strerror(errno));
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	ch = ibv_create_comp_channel(ctx);
	if (!ch)
		FAIL("ibv_create_comp_channel: %s", strerror(errno));

	/* A handler thread holds the CQ's event while main destroys the CQ. */
	cq = cq_with_event(&qp);
	if (pthread_create(&t, NULL, handler, NULL))
		FAIL("pthread_create");
	while (!atomic_load(&taken))
		usleep(1000);
	drain_and_destroy_qp(cq, qp);
	if ((r = ibv_destroy_cq(cq)))
		FAIL("ibv_destroy_cq: %s", strerror(r));
	printf("destroy returned %s the acknowledgement\n",
	       atomic_load(&acked) ? "after" : "before");
	pthread_join(t, NULL);

	/* A CQ destroyed with its event still queued on the channel: the event is not
	 * reported. The channel's fd is readable once the event is queued there. */
	cq = cq_with_event(&qp);
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	if (poll(&p, 1, -1) != 1)
		FAIL("poll: %s", strerror(errno));
	drain_and_destroy_qp(cq, qp);
	if ((r = ibv_destroy_cq(cq)))
		FAIL("ibv_destroy_cq: %s", strerror(r));
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	r = ibv_get_cq_event(ch, &got, &got_ctx);
	printf("after destroy: %d %s\n", r, r ? strerror(errno) : "an event");
	fcntl(ch->fd, F_SETFL, fl);

	/* A channel with a CQ attached cannot be destroyed; without it, it can. */
	cq = ibv_create_cq(ctx, 16, &marker, ch, 0);
	if (!cq)
		FAIL("ibv_create_cq: %s", strerror(errno));
	r = ibv_destroy_comp_channel(ch);
	printf("destroy channel with a CQ: %s\n", r ? strerror(r) : "destroyed");
	if (r == 0)
		return 1;
	if ((r = ibv_destroy_cq(cq)))
		FAIL("ibv_destroy_cq: %s", strerror(r));
	r = ibv_destroy_comp_channel(ch);
	printf("destroy channel without CQs: %s\n", r ? strerror(r) : "destroyed");

	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("ok\n");
	return 0;
}
