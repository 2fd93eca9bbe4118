/*
 * addrinfo: resolves addresses through librdmacm's rdma_getaddrinfo and prints what it
 * answers, one "key: value" per line, then "ok". Built against rdma-core's headers; the
 * tests link it against this project's librdmacm.so.1 (capi/rdmacm) and check the lines.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return 1; } while (0)

static const char *addr(struct sockaddr *sa, char *buf, size_t len)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)sa;
	if (!sa)
		return "none";
	if (sa->sa_family != AF_INET)
		return "not-ipv4";
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
	snprintf(buf, len, "%s:%u", ip, ntohs(sin->sin_port));
	return buf;
}

static int show(const char *tag, const char *node, const char *service, struct rdma_addrinfo *hints)
{
	struct rdma_addrinfo *res = NULL;
	char a[64], b[64];
	int ret = rdma_getaddrinfo(node, service, hints, &res);
	if (ret) {
		printf("%s: error %s\n", tag, ret == -1 ? strerror(errno) : gai_strerror(ret));
		return 0;
	}
	printf("%s: src %s dst %s qp_type %d ps 0x%x next %s\n", tag,
	       addr(res->ai_src_addr, a, sizeof(a)), addr(res->ai_dst_addr, b, sizeof(b)),
	       res->ai_qp_type, res->ai_port_space, res->ai_next ? "yes" : "no");
	rdma_freeaddrinfo(res);
	return 0;
}

int main(void)
{
	struct rdma_addrinfo hints;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	show("passive", "127.0.0.1", "7471", &hints);

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	show("active", "127.0.0.1", "7471", &hints);

	struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = htons(0) };
	inet_pton(AF_INET, "127.0.0.2", &src.sin_addr);
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_UDP;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	show("udp_with_src", "127.0.0.1", "7174", &hints);

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	show("bad_host", "not-an-address", "7471", &hints);

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET6;
	show("ipv6", "::1", "7471", &hints);

	printf("event_str: %s %s\n", rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), rdma_event_str(99));

	errno = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	printf("event_channel: %s\n", ch ? "created" : strerror(errno));
	printf("ok\n");
	return 0;
}
