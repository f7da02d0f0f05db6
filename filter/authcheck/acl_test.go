package authcheck_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter/authcheck"
)

const (
	literal  = kmsg.ACLResourcePatternTypeLiteral
	prefixed = kmsg.ACLResourcePatternTypePrefixed
	write    = kmsg.ACLOperationWrite
	all      = kmsg.ACLOperationAll
	read     = kmsg.ACLOperationRead
	allow    = kmsg.ACLPermissionTypeAllow
	deny     = kmsg.ACLPermissionTypeDeny
)

func acl(principal string, pat kmsg.ACLResourcePatternType, name string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) authcheck.ACL {
	return authcheck.ACL{Principal: principal, Host: "*", Pattern: pat, Name: name, Operation: op, Permission: perm}
}

// TestWrite decides WRITE the way Kafka's StandardAuthorizer does.
func TestWrite(t *testing.T) {
	t.Parallel()
	onHost := acl("User:bob", literal, "orders", write, allow)
	onHost.Host = "10.0.0.7"
	cases := []struct {
		name         string
		acls         authcheck.ACLs
		principal    string
		host         string
		allowIfNoACL bool
		want         authcheck.Decision
	}{
		{"no authorizer", authcheck.ACLs{NoAuthorizer: true}, "User:bob", "", false, authcheck.NoAuthorizer},
		{"no ACL at all", authcheck.ACLs{}, "User:bob", "", false, authcheck.NoAllow},
		{"no ACL at all, allow.everyone.if.no.acl.found", authcheck.ACLs{}, "User:bob", "", true, authcheck.AllowedNoACL},
		{"literal allow", authcheck.ACLs{List: []authcheck.ACL{acl("User:bob", literal, "orders", write, allow)}}, "User:bob", "", false, authcheck.Allowed},
		{"literal allow of ALL", authcheck.ACLs{List: []authcheck.ACL{acl("User:bob", literal, "orders", all, allow)}}, "User:bob", "", false, authcheck.Allowed},
		{"allow of READ only", authcheck.ACLs{List: []authcheck.ACL{acl("User:bob", literal, "orders", read, allow)}}, "User:bob", "", false, authcheck.NoAllow},
		{"another topic's allow", authcheck.ACLs{List: []authcheck.ACL{acl("User:bob", literal, "orders2", write, allow)}}, "User:bob", "", false, authcheck.NoAllow},
		{"another principal's allow", authcheck.ACLs{List: []authcheck.ACL{acl("User:alice", literal, "orders", write, allow)}}, "User:bob", "", false, authcheck.NoAllow},
		{"another principal's allow covers the topic: no allow.everyone", authcheck.ACLs{List: []authcheck.ACL{acl("User:alice", literal, "orders", write, allow)}}, "User:bob", "", true, authcheck.NoAllow},
		{"prefixed allow", authcheck.ACLs{List: []authcheck.ACL{acl("User:bob", prefixed, "ord", write, allow)}}, "User:bob", "", false, authcheck.Allowed},
		{"prefixed allow, not a prefix", authcheck.ACLs{List: []authcheck.ACL{acl("User:bob", prefixed, "orders-", write, allow)}}, "User:bob", "", false, authcheck.NoAllow},
		{"literal * allows every topic", authcheck.ACLs{List: []authcheck.ACL{acl("User:bob", literal, "*", write, allow)}}, "User:bob", "", false, authcheck.Allowed},
		{"prefixed * is a prefix, not a wildcard", authcheck.ACLs{List: []authcheck.ACL{acl("User:bob", prefixed, "*", write, allow)}}, "User:bob", "", false, authcheck.NoAllow},
		{"wildcard principal", authcheck.ACLs{List: []authcheck.ACL{acl("User:*", literal, "orders", write, allow)}}, "User:bob", "", false, authcheck.Allowed},
		{"User:* is the wildcard of every principal type", authcheck.ACLs{List: []authcheck.ACL{acl("User:*", literal, "orders", write, allow)}}, "Group:ops", "", false, authcheck.Allowed},
		{"no wildcard of another type", authcheck.ACLs{List: []authcheck.ACL{acl("Group:*", literal, "orders", write, allow)}}, "Group:ops", "", false, authcheck.NoAllow},
		{"DENY wins over ALLOW", authcheck.ACLs{List: []authcheck.ACL{
			acl("User:bob", literal, "orders", write, allow), acl("User:bob", literal, "orders", write, deny)}}, "User:bob", "", false, authcheck.Denied},
		{"prefixed DENY of ALL wins over a literal ALLOW", authcheck.ACLs{List: []authcheck.ACL{
			acl("User:bob", literal, "orders", write, allow), acl("User:bob", prefixed, "or", all, deny)}}, "User:bob", "", false, authcheck.Denied},
		{"wildcard DENY wins over the principal's ALLOW", authcheck.ACLs{List: []authcheck.ACL{
			acl("User:bob", literal, "orders", write, allow), acl("User:*", literal, "*", write, deny)}}, "User:bob", "", false, authcheck.Denied},
		{"another principal's DENY", authcheck.ACLs{List: []authcheck.ACL{
			acl("User:bob", literal, "orders", write, allow), acl("User:alice", literal, "orders", write, deny)}}, "User:bob", "", false, authcheck.Allowed},
		{"DENY of READ leaves WRITE", authcheck.ACLs{List: []authcheck.ACL{
			acl("User:bob", literal, "orders", write, allow), acl("User:bob", literal, "orders", read, deny)}}, "User:bob", "", false, authcheck.Allowed},
		{"host ACL, host unknown", authcheck.ACLs{List: []authcheck.ACL{onHost}}, "User:bob", "", false, authcheck.NoAllow},
		{"host ACL, that host", authcheck.ACLs{List: []authcheck.ACL{onHost}}, "User:bob", "10.0.0.7", false, authcheck.Allowed},
		{"host ACL, another host", authcheck.ACLs{List: []authcheck.ACL{onHost}}, "User:bob", "10.0.0.8", false, authcheck.NoAllow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.acls.Write(tc.principal, tc.host, "orders", tc.allowIfNoACL); got != tc.want {
				t.Fatalf("Write = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFromResponse reads DescribeACLs answers: SECURITY_DISABLED is a
// destination without an authorizer, CLUSTER_AUTHORIZATION_FAILED one the
// agent may not read, and version 0 lists LITERAL resources only.
func TestFromResponse(t *testing.T) {
	t.Parallel()
	resp := func(v int16, code int16, rs ...kmsg.DescribeACLsResponseResource) *kmsg.DescribeACLsResponse {
		r := kmsg.NewPtrDescribeACLsResponse()
		r.Version, r.ErrorCode, r.Resources = v, code, rs
		return r
	}
	res := func(pat kmsg.ACLResourcePatternType, name string) kmsg.DescribeACLsResponseResource {
		return kmsg.DescribeACLsResponseResource{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: name, ResourcePatternType: pat,
			ACLs: []kmsg.DescribeACLsResponseResourceACL{{Principal: "User:bob", Host: "*", Operation: write, PermissionType: allow}}}
	}

	got, err := authcheck.FromResponse(resp(3, kerr.SecurityDisabled.Code))
	if err != nil || !got.NoAuthorizer || got.Write("User:bob", "", "orders", false) != authcheck.NoAuthorizer {
		t.Fatalf("SECURITY_DISABLED: %+v, %v; want no authorizer, everything allowed", got, err)
	}
	if _, err := authcheck.FromResponse(resp(3, kerr.ClusterAuthorizationFailed.Code)); !errors.Is(err, authcheck.ErrCannotRead) {
		t.Fatalf("CLUSTER_AUTHORIZATION_FAILED: %v, want ErrCannotRead", err)
	}
	if _, err := authcheck.FromResponse(resp(3, kerr.UnknownServerError.Code)); err == nil || errors.Is(err, authcheck.ErrCannotRead) {
		t.Fatalf("UNKNOWN_SERVER_ERROR: %v, want an error other than ErrCannotRead", err)
	}
	got, err = authcheck.FromResponse(resp(3, 0, res(prefixed, "ord")))
	if err != nil || got.Write("User:bob", "", "orders", false) != authcheck.Allowed {
		t.Fatalf("v3 prefixed: %+v, %v; want bob allowed on orders", got, err)
	}
	got, err = authcheck.FromResponse(resp(0, 0, res(0, "orders")))
	if err != nil || len(got.List) != 1 || got.List[0].Pattern != literal || got.Write("User:bob", "", "orders", false) != authcheck.Allowed {
		t.Fatalf("v0: %+v, %v; want one LITERAL ACL allowing bob", got, err)
	}
}
