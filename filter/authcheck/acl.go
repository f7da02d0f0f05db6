package authcheck

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ACL is one of the destination's topic ACLs, as DescribeACLs lists it.
type ACL struct {
	// Principal is "User:alice", or "User:*" for every principal.
	Principal string
	// Host is "*" or one client address.
	Host string
	// Pattern is LITERAL (Name is the topic, or "*" for every topic) or
	// PREFIXED (Name is a prefix of the topics it covers).
	Pattern    kmsg.ACLResourcePatternType
	Name       string
	Operation  kmsg.ACLOperation
	Permission kmsg.ACLPermissionType
}

func (a ACL) String() string {
	return fmt.Sprintf("%s %s %s on TOPIC %s (%s) from host %s", a.Permission, a.Principal, a.Operation, a.Name, a.Pattern, a.Host)
}

// ACLs is what the destination's authorizer says about topics: its topic
// ACLs, or that it has no authorizer.
type ACLs struct {
	// NoAuthorizer: DescribeACLs answered SECURITY_DISABLED, the
	// destination has no authorizer, and every principal may write every
	// topic.
	NoAuthorizer bool
	List         []ACL
}

// Decision is what the destination's authorizer would answer a WRITE.
type Decision uint8

// Decisions. Only Denied and NoAllow refuse.
const (
	// Allowed: an ALLOW matched and no DENY did.
	Allowed Decision = iota
	// NoAuthorizer: the destination has no authorizer.
	NoAuthorizer
	// SuperUser: the principal is one of Config.SuperUsers.
	SuperUser
	// AllowedNoACL: no ACL names the topic at all and the destination
	// allows everyone then (Config.AllowEveryoneIfNoACL).
	AllowedNoACL
	// Denied: a DENY matched; DENY wins over any ALLOW.
	Denied
	// NoAllow: no ALLOW matched.
	NoAllow
)

// OK says whether the write would be allowed.
func (d Decision) OK() bool { return d < Denied }

func (d Decision) String() string {
	switch d {
	case Allowed:
		return "allowed"
	case NoAuthorizer:
		return "no authorizer"
	case SuperUser:
		return "super user"
	case AllowedNoACL:
		return "no ACL for the topic, everyone allowed"
	case Denied:
		return "denied by a DENY ACL"
	}
	return "no ALLOW ACL"
}

// ACLRequest is the DescribeACLs request the filter sends: every ACL of
// every topic resource, LITERAL and PREFIXED.
func ACLRequest() *kmsg.DescribeACLsRequest {
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType = kmsg.ACLResourceTypeTopic
	req.ResourcePatternType = kmsg.ACLResourcePatternTypeAny
	req.Operation = kmsg.ACLOperationAny
	req.PermissionType = kmsg.ACLPermissionTypeAny
	return req
}

// FromResponse reads a DescribeACLs answer: SECURITY_DISABLED is a
// destination without an authorizer; CLUSTER_AUTHORIZATION_FAILED wraps
// ErrCannotRead (the agent lacks DESCRIBE on the cluster); any other error
// is returned as is.
func FromResponse(resp *kmsg.DescribeACLsResponse) (ACLs, error) {
	switch err := kerr.ErrorForCode(resp.ErrorCode); {
	case err == nil:
	case err == kerr.SecurityDisabled:
		return ACLs{NoAuthorizer: true}, nil
	case err == kerr.ClusterAuthorizationFailed:
		return ACLs{}, fmt.Errorf("%w: %w", ErrCannotRead, err)
	default:
		msg := ""
		if resp.ErrorMessage != nil {
			msg = ": " + *resp.ErrorMessage
		}
		return ACLs{}, fmt.Errorf("%w%s", err, msg)
	}
	var out ACLs
	for _, r := range resp.Resources {
		if r.ResourceType != kmsg.ACLResourceTypeTopic {
			continue
		}
		pat := r.ResourcePatternType
		if resp.Version == 0 || pat == kmsg.ACLResourcePatternTypeUnknown {
			pat = kmsg.ACLResourcePatternTypeLiteral // v0 knows only LITERAL
		}
		for _, a := range r.ACLs {
			out.List = append(out.List, ACL{Principal: a.Principal, Host: a.Host, Pattern: pat, Name: r.ResourceName,
				Operation: a.Operation, Permission: a.PermissionType})
		}
	}
	return out, nil
}

// Write decides, as Kafka's StandardAuthorizer does, whether principal
// connecting from host may WRITE topic. An ACL applies when its resource
// covers the topic (LITERAL of the name or of "*", PREFIXED of a prefix of
// it), its principal is the principal or the wildcard "User:*" (Kafka's
// one wildcard principal, whatever the principal's type), its host is "*" or host, and its operation is WRITE or ALL.
// A DENY that applies wins; else an ALLOW that applies allows; else the
// write is refused, unless allowIfNoACL and no ACL at all covers the
// topic (allow.everyone.if.no.acl.found). Super users are the caller's
// business.
func (a *ACLs) Write(principal, host, topic string, allowIfNoACL bool) Decision {
	if a.NoAuthorizer {
		return NoAuthorizer
	}
	const wildcard = "User:*"
	covered, allowed := false, false
	for i := range a.List {
		acl := &a.List[i]
		switch acl.Pattern {
		case kmsg.ACLResourcePatternTypeLiteral:
			if acl.Name != topic && acl.Name != "*" {
				continue
			}
		case kmsg.ACLResourcePatternTypePrefixed:
			if !strings.HasPrefix(topic, acl.Name) {
				continue
			}
		default:
			continue
		}
		covered = true
		if acl.Principal != principal && acl.Principal != wildcard {
			continue
		}
		if acl.Host != "*" && (host == "" || acl.Host != host) {
			continue
		}
		if acl.Operation != kmsg.ACLOperationWrite && acl.Operation != kmsg.ACLOperationAll {
			continue
		}
		switch acl.Permission {
		case kmsg.ACLPermissionTypeDeny:
			return Denied
		case kmsg.ACLPermissionTypeAllow:
			allowed = true
		}
	}
	switch {
	case allowed:
		return Allowed
	case !covered && allowIfNoACL:
		return AllowedNoACL
	}
	return NoAllow
}
