// Package xds will own Baton's xDS server wiring (go-control-plane cache,
// ADS) and the client helpers agents use, with per-namespace targeting by
// node metadata. Nothing is built here yet: the control-plane issue brings
// it; until then agents read static routes (agent.LoadRoutes).
package xds
