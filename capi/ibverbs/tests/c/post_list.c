/*
 * Posting a list of work requests: libibverbs posts them in order and stops at the first it
 * cannot take, returns that request's errno and points *bad_wr at it; the requests before it
 * were posted, the ones after it were not. A receive list whose second request has a negative
 * SGE count: the first is posted (it completes, flushed, once the QP goes to the error
 * state), the third is not. A send list whose first request has an unknown opcode: nothing
 * posted, *bad_wr is the first. Prints its findings; exits 1 on a failed call.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "rc_qp.h"

static char buf[64];

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		FAIL("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		FAIL("ibv_open_device: %s", strerror(errno));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !mr || !cq)
		FAIL("set-up: %s", strerror(errno));
	struct ibv_qp *qp = rc_qp_in_init(pd, cq, 4);
	struct ibv_qp_attr a;
	int r;

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(buf), .lkey = mr->lkey };
	struct ibv_recv_wr rw[3], *rbad = NULL;
	memset(rw, 0, sizeof(rw));
	for (int i = 0; i < 3; i++) {
		rw[i].wr_id = 10 + i;
		rw[i].sg_list = &sge;
		rw[i].num_sge = 1;
		rw[i].next = i < 2 ? &rw[i + 1] : NULL;
	}
	rw[1].num_sge = -1;
	r = ibv_post_recv(qp, &rw[0], &rbad);
	printf("post_recv: %s, bad_wr %s\n", r ? strerror(r) : "posted",
	       rbad == &rw[1] ? "the second" : "elsewhere");

	struct ibv_send_wr sw[2], *sbad = NULL;
	memset(sw, 0, sizeof(sw));
	sw[0].wr_id = 20;
	sw[0].opcode = 99;
	sw[0].next = &sw[1];
	sw[1].wr_id = 21;
	sw[1].opcode = IBV_WR_SEND;
	r = ibv_post_send(qp, &sw[0], &sbad);
	printf("post_send: %s, bad_wr %s\n", r ? strerror(r) : "posted",
	       sbad == &sw[0] ? "the first" : "elsewhere");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE)))
		FAIL("ibv_modify_qp ERR: %s", strerror(r));
	/* The flushed completions: only the first receive was posted. */
	struct ibv_wc wc[4];
	int got = 0;
	for (int tries = 0; tries < 2000 && got < 1; tries++) {
		int n = ibv_poll_cq(cq, 4, wc + got);
		if (n < 0)
			FAIL("ibv_poll_cq: %d", n);
		got += n;
		if (!got)
			usleep(1000);
	}
	usleep(20000);
	int n = ibv_poll_cq(cq, 4 - got, wc + got);
	if (n < 0)
		FAIL("ibv_poll_cq: %d", n);
	got += n;
	printf("flushed: %d completion(s)", got);
	for (int i = 0; i < got; i++)
		printf(" wr_id %llu status %s", (unsigned long long)wc[i].wr_id,
		       wc[i].status == IBV_WC_WR_FLUSH_ERR ? "flushed" : "other");
	printf("\n");
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd))
		FAIL("teardown: %s", strerror(errno));
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("ok\n");
	return 0;
}
