/*
 * devinfo: opens the first RDMA device through libibverbs and prints what the queries say,
 * one "key: value" per line, then "ok". Built against rdma-core's headers, it runs on any
 * libibverbs.so.1; the tests link it against this project's (capi/ibverbs) and check the
 * lines. Exit status 0 when every call behaved, 1 otherwise (the failing call is printed).
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return 1; } while (0)

int main(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		FAIL("ibv_get_device_list: %s", strerror(errno));
	printf("devices: %d\n", n);
	if (n < 1)
		FAIL("no RDMA devices");
	printf("name: %s\n", ibv_get_device_name(list[0]));
	printf("transport_type: %d\n", list[0]->transport_type);

	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		FAIL("ibv_open_device: %s", strerror(errno));
	if (ctx->device != list[0])
		FAIL("context->device is not the listed device");

	struct ibv_device_attr da;
	int ret = ibv_query_device(ctx, &da);
	if (ret)
		FAIL("ibv_query_device: %s", strerror(ret));
	printf("fw_ver: %s\n", da.fw_ver);
	printf("node_guid: %016llx\n", (unsigned long long)be64toh(da.node_guid));
	printf("vendor_id: 0x%x\n", da.vendor_id);
	printf("vendor_part_id: %u\n", da.vendor_part_id);
	printf("max_qp: %d\nmax_cqe: %d\nmax_mr: %d\nmax_pd: %d\n", da.max_qp, da.max_cqe, da.max_mr, da.max_pd);
	printf("phys_port_cnt: %u\n", da.phys_port_cnt);

	/* The header's ibv_query_port wrapper (the extended context's query_port slot). */
	struct ibv_port_attr pa;
	ret = ibv_query_port(ctx, 1, &pa);
	if (ret)
		FAIL("ibv_query_port: %s", strerror(ret));
	printf("port_state: %d\nactive_mtu: %d\nlink_layer: %u\ngid_tbl_len: %d\n", pa.state,
	       pa.active_mtu, pa.link_layer, pa.gid_tbl_len);

	/* The exported symbol itself: the legacy 48 bytes only. */
	struct ibv_port_attr pb;
	memset(&pb, 0xab, sizeof(pb));
	ret = (ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)&pb);
	if (ret)
		FAIL("ibv_query_port symbol: %s", strerror(ret));
	if (memcmp(&pa, &pb, 48) != 0)
		FAIL("ibv_query_port symbol and wrapper disagree");
	if (pb.port_cap_flags2 != 0xabab)
		FAIL("ibv_query_port symbol wrote past the legacy struct");
	printf("legacy_query_port: ok\n");

	ret = ibv_query_port(ctx, 7, &pa);
	printf("query_port_7: %s\n", ret ? "error" : "ok");

	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		FAIL("ibv_query_gid: %s", strerror(errno));
	char text[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
	printf("gid0: %s\n", text);

	struct ibv_gid_entry ge;
	ret = ibv_query_gid_ex(ctx, 1, 0, &ge, 0);
	if (ret)
		FAIL("ibv_query_gid_ex: %s", strerror(ret));
	if (memcmp(ge.gid.raw, gid.raw, 16) != 0 || ge.gid_index != 0 || ge.port_num != 1)
		FAIL("ibv_query_gid_ex disagrees with ibv_query_gid");
	printf("gid0_type: %u\n", ge.gid_type);

	__be16 pkey;
	if (ibv_query_pkey(ctx, 1, 0, &pkey))
		FAIL("ibv_query_pkey: %s", strerror(errno));
	printf("pkey0: 0x%04x\n", ntohs(pkey));

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		FAIL("ibv_alloc_pd: %s", strerror(errno));
	if (pd->context != ctx)
		FAIL("pd->context is not the context");
	ret = ibv_dealloc_pd(pd);
	if (ret)
		FAIL("ibv_dealloc_pd: %s", strerror(ret));
	printf("pd: ok\n");

	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		FAIL("ibv_create_cq: %s", strerror(errno));
	printf("create_cq: created, cqe %s\n", cq->cqe >= 16 ? ">= 16" : "too small");
	ret = ibv_destroy_cq(cq);
	if (ret)
		FAIL("ibv_destroy_cq: %s", strerror(ret));

	/* Not implemented yet: a clean failure, no abort. */
	errno = 0;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(NULL, &sa);
	printf("create_srq: %s\n", srq ? "created" : strerror(errno));

	if (ibv_close_device(ctx))
		FAIL("ibv_close_device: %s", strerror(errno));
	ibv_free_device_list(list);
	printf("ok\n");
	return 0;
}
