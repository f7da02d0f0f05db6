//go:build ignore

// Byte counters per registered TCP socket. Userspace registers a socket by
// putting its cookie (getsockopt SO_COOKIE) in `conns` with zeroed counts;
// the two programs below add the bytes every recvmsg/sendmsg on that socket
// moved. Every other socket costs one cookie read and one failed lookup.

// The kernel's fixed-width types, spelt here so the build needs no kernel
// or libc headers for the host (only libbpf's bpf_helpers.h).
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

// From linux/bpf.h's enum bpf_map_type (UAPI, fixed).
#define BPF_MAP_TYPE_HASH 1

#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// MSG_PEEK from the socket API: a peek leaves the bytes queued, and the
// read that takes them is counted then.
#define MSG_PEEK 2

// Value of `conns`. Layout shared with Go (bpf2go generates the type).
struct counts {
	__u64 received;
	__u64 sent;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); // userspace may raise it at load time
	__type(key, __u64);         // socket cookie
	__type(value, struct counts);
} conns SEC(".maps");

// tp_btf programs get the tracepoint's arguments as an array of u64 with
// BTF types the verifier knows: for both sock_{send,recv}_length that is
// (struct sock *sk, int ret, int flags). bpf_get_socket_cookie takes the
// typed sk pointer in tracing programs; NULL gives cookie 0, never
// registered.

SEC("tp_btf/sock_recv_length")
int count_recv(unsigned long long *ctx)
{
	int ret = (int)ctx[1];
	int flags = (int)ctx[2];
	if (ret <= 0 || (flags & MSG_PEEK))
		return 0;
	__u64 cookie = bpf_get_socket_cookie((void *)ctx[0]);
	struct counts *c = bpf_map_lookup_elem(&conns, &cookie);
	if (c)
		__sync_fetch_and_add(&c->received, (__u64)ret);
	return 0;
}

SEC("tp_btf/sock_send_length")
int count_send(unsigned long long *ctx)
{
	int ret = (int)ctx[1];
	if (ret <= 0)
		return 0;
	__u64 cookie = bpf_get_socket_cookie((void *)ctx[0]);
	struct counts *c = bpf_map_lookup_elem(&conns, &cookie);
	if (c)
		__sync_fetch_and_add(&c->sent, (__u64)ret);
	return 0;
}
