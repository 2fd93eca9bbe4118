/*
 * An event held by one thread while another destroys its id (rping's client does this at
 * exit: its cm_thread takes the DISCONNECTED event while main calls rdma_destroy_id, then
 * frees the structure the event handler uses). librdmacm's rdma_destroy_id returns only once
 * every event reported for the id is acknowledged, so the handler still sees a live id.
 * Then: an event of an id destroyed before anyone took it is never reported. Last, ids
 * destroyed while a handler thread takes their events without pause (an event may be in the
 * making when rdma_destroy_id is called): no crash, every event names a live id of ours.
 * Prints its findings; exits 1 on a failed call.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static struct rdma_event_channel *ch;
static atomic_int taken, acked;
static int marker;

static void *handler(void *arg)
{
	struct rdma_cm_event *ev;

	(void)arg;
	if (rdma_get_cm_event(ch, &ev))
		FAIL("rdma_get_cm_event: %s", strerror(errno));
	printf("handler: %s\n", rdma_event_str(ev->event));
	atomic_store(&taken, 1);
	/* Still handling the event when main destroys the id. */
	usleep(300000);
	printf("handler: id context %s\n", ev->id->context == &marker ? "intact" : "lost");
	atomic_store(&acked, 1);
	rdma_ack_cm_event(ev);
	return NULL;
}

#define CHURN 400
static int last;
static atomic_int lost;

/* Takes events until the last id's; counts events whose id is not one of ours. */
static void *churn_handler(void *arg)
{
	struct rdma_cm_event *ev;

	(void)arg;
	for (;;) {
		if (rdma_get_cm_event(ch, &ev))
			FAIL("rdma_get_cm_event: %s", strerror(errno));
		void *c = ev->id->context;
		if (c != &marker && c != &last)
			atomic_store(&lost, 1);
		rdma_ack_cm_event(ev);
		if (c == &last)
			return NULL;
	}
}

static void resolve(struct rdma_cm_id *id, const char *ip)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(7998);
	if (inet_pton(AF_INET, ip, &sin.sin_addr) != 1)
		FAIL("bad address");
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000))
		FAIL("rdma_resolve_addr: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	const char *ip = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	pthread_t t;

	ch = rdma_create_event_channel();
	if (!ch)
		FAIL("rdma_create_event_channel: %s", strerror(errno));
	if (rdma_create_id(ch, &id, &marker, RDMA_PS_TCP))
		FAIL("rdma_create_id: %s", strerror(errno));
	resolve(id, ip);
	if (pthread_create(&t, NULL, handler, NULL))
		FAIL("pthread_create");
	while (!atomic_load(&taken))
		usleep(1000);
	if (rdma_destroy_id(id))
		FAIL("rdma_destroy_id: %s", strerror(errno));
	printf("destroy returned %s the acknowledgement\n",
	       atomic_load(&acked) ? "after" : "before");
	pthread_join(t, NULL);

	/* An id destroyed with its event still queued: the event is not reported. */
	if (rdma_create_id(ch, &id, &marker, RDMA_PS_TCP))
		FAIL("rdma_create_id: %s", strerror(errno));
	resolve(id, ip);
	if (rdma_destroy_id(id))
		FAIL("rdma_destroy_id: %s", strerror(errno));
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	usleep(100000);
	int r = rdma_get_cm_event(ch, &ev);
	printf("after destroy: %d %s\n", r, r ? strerror(errno) : rdma_event_str(ev->event));
	fcntl(ch->fd, F_SETFL, fl);

	/* Ids destroyed while their events are being made: a handler takes events without
	 * pause while main creates, resolves and destroys ids, then one last id it keeps. */
	pthread_t t2;
	if (pthread_create(&t2, NULL, churn_handler, NULL))
		FAIL("pthread_create");
	for (int i = 0; i < CHURN; i++) {
		if (rdma_create_id(ch, &id, &marker, RDMA_PS_TCP))
			FAIL("rdma_create_id: %s", strerror(errno));
		resolve(id, ip);
		usleep(i % 7 * 50);
		if (rdma_destroy_id(id))
			FAIL("rdma_destroy_id: %s", strerror(errno));
	}
	if (rdma_create_id(ch, &id, &last, RDMA_PS_TCP))
		FAIL("rdma_create_id: %s", strerror(errno));
	resolve(id, ip);
	pthread_join(t2, NULL);
	if (rdma_destroy_id(id))
		FAIL("rdma_destroy_id: %s", strerror(errno));
	printf("churn: every event's id intact: %s\n", atomic_load(&lost) ? "no" : "yes");
	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
