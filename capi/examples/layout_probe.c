/*
 * layout_probe: prints the size of each object and the offset of each field a program
 * uses, one "name value" per line. The tests compile it against rdma-core's headers and
 * against this project's (capi/include) and require the same output: the two header sets
 * describe the same ABI.
 */
#include <stddef.h>
#include <stdio.h>
#include <rdma/rdma_cma.h>

#define SZ(t) printf("sizeof(" #t ") %zu\n", sizeof(t))
#define OFF(t, f) printf("offsetof(" #t ", " #f ") %zu\n", offsetof(t, f))

int main(void)
{
	SZ(struct ibv_device); OFF(struct ibv_device, name); OFF(struct ibv_device, ibdev_path);
	SZ(struct ibv_context_ops); OFF(struct ibv_context_ops, poll_cq);
	OFF(struct ibv_context_ops, req_notify_cq); OFF(struct ibv_context_ops, post_srq_recv);
	OFF(struct ibv_context_ops, post_send); OFF(struct ibv_context_ops, post_recv);
	SZ(struct ibv_context); OFF(struct ibv_context, cmd_fd); OFF(struct ibv_context, mutex);
	OFF(struct ibv_context, abi_compat);
	SZ(struct ibv_device_attr); OFF(struct ibv_device_attr, max_qp);
	OFF(struct ibv_device_attr, atomic_cap); OFF(struct ibv_device_attr, phys_port_cnt);
	SZ(struct ibv_port_attr); OFF(struct ibv_port_attr, lid); OFF(struct ibv_port_attr, link_layer);
	SZ(struct ibv_pd); SZ(struct ibv_mr); OFF(struct ibv_mr, lkey); OFF(struct ibv_mr, rkey);
	SZ(struct ibv_comp_channel); OFF(struct ibv_comp_channel, fd);
	SZ(struct ibv_cq); OFF(struct ibv_cq, cq_context); OFF(struct ibv_cq, cqe);
	OFF(struct ibv_cq, comp_events_completed);
	SZ(struct ibv_qp); OFF(struct ibv_qp, qp_num); OFF(struct ibv_qp, state);
	OFF(struct ibv_qp, qp_type); OFF(struct ibv_qp, events_completed);
	SZ(struct ibv_srq); SZ(struct ibv_ah); SZ(struct ibv_sge);
	SZ(struct ibv_wc); OFF(struct ibv_wc, status); OFF(struct ibv_wc, byte_len);
	OFF(struct ibv_wc, imm_data); OFF(struct ibv_wc, src_qp); OFF(struct ibv_wc, wc_flags);
	OFF(struct ibv_wc, sl);
	SZ(struct ibv_send_wr); OFF(struct ibv_send_wr, opcode); OFF(struct ibv_send_wr, imm_data);
	OFF(struct ibv_send_wr, wr.rdma.rkey); OFF(struct ibv_send_wr, wr.atomic.swap);
	OFF(struct ibv_send_wr, wr.atomic.rkey); OFF(struct ibv_send_wr, wr.ud.remote_qkey);
	OFF(struct ibv_send_wr, qp_type.xrc.remote_srqn); OFF(struct ibv_send_wr, tso.mss);
	SZ(struct ibv_recv_wr); SZ(struct ibv_qp_cap);
	SZ(struct ibv_qp_init_attr); OFF(struct ibv_qp_init_attr, qp_type);
	OFF(struct ibv_qp_init_attr, sq_sig_all);
	SZ(union ibv_gid); SZ(struct ibv_global_route); SZ(struct ibv_grh);
	SZ(struct ibv_ah_attr); OFF(struct ibv_ah_attr, dlid); OFF(struct ibv_ah_attr, port_num);
	SZ(struct ibv_qp_attr); OFF(struct ibv_qp_attr, cap); OFF(struct ibv_qp_attr, ah_attr);
	OFF(struct ibv_qp_attr, min_rnr_timer); OFF(struct ibv_qp_attr, rate_limit);
	SZ(struct rdma_event_channel); SZ(struct rdma_addr); OFF(struct rdma_addr, dst_addr);
	OFF(struct rdma_addr, addr.ibaddr.pkey); SZ(struct rdma_route);
	SZ(struct rdma_cm_id); OFF(struct rdma_cm_id, qp); OFF(struct rdma_cm_id, route.addr.dst_sin);
	OFF(struct rdma_cm_id, ps); OFF(struct rdma_cm_id, port_num); OFF(struct rdma_cm_id, event);
	OFF(struct rdma_cm_id, recv_cq); OFF(struct rdma_cm_id, pd); OFF(struct rdma_cm_id, qp_type);
	SZ(struct rdma_conn_param); OFF(struct rdma_conn_param, qp_num);
	SZ(struct rdma_ud_param); OFF(struct rdma_ud_param, ah_attr); OFF(struct rdma_ud_param, qkey);
	SZ(struct rdma_cm_event); OFF(struct rdma_cm_event, param.ud.qkey);
	SZ(struct rdma_addrinfo); OFF(struct rdma_addrinfo, ai_next);
	printf("IBV_WC_RECV %d IBV_QPT_UD %d RDMA_PS_UDP %d RDMA_CM_EVENT_TIMEWAIT_EXIT %d\n",
	       IBV_WC_RECV, IBV_QPT_UD, RDMA_PS_UDP, RDMA_CM_EVENT_TIMEWAIT_EXIT);
	return 0;
}
