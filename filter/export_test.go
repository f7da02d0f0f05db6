package filter

// Live is how many goroutines c started that have not returned: the one
// that finishes held requests and the WakeOn watchers.
func Live(c *Chain) int { return int(c.live.Load()) }
