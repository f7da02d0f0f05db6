package agent

import "fmt"

// checkTopicRoutes refuses an xDS route update the route table must not
// hold: a route with no topic (no request names one, so it would route
// nothing while looking managed) or a topic listed twice (which of the two
// wins would depend on order; the static route file refuses both too).
func checkTopicRoutes(routes []Route) error {
	seen := make(map[string]bool, len(routes))
	for i, r := range routes {
		switch {
		case r.Topic == "":
			return fmt.Errorf("routes[%d].topic: required", i)
		case seen[r.Topic]:
			return fmt.Errorf("routes[%d].topic: %q listed twice", i, r.Topic)
		}
		seen[r.Topic] = true
	}
	return nil
}
