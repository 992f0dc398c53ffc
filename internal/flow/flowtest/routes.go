package flowtest

import (
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/keyfunc"
)

// routeCases are the cases of keyfunc.Route, the route key of the keyfunc
// package, passed with WithKey: under every adapter it keys by the route
// the router matched, like the adapter's own RouteKey. Only middleware
// that runs before routing cannot know the route (Adapter.GlobalBeforeRouting):
// there keyfunc.Route is a key error, reported, and the request is limited
// by its peer address.
func routeCases[O ~func(*flow.Config), M any](a Adapter[O, M], rdb *redis.Client, prefix func(string) O) []testCase[M] {
	var cs []testCase[M]
	global := &errorLog{}
	steps := []step{
		{path: "/users/1", status: 200},
		{path: "/users/2", status: 429, peer: "198.51.100.9:4000"}, // same route, other id and client
		{path: "/items/1", status: 200},                            // another route
		{path: "/items/2", status: 429},
		{path: "/", status: 200},
		{path: "/nowhere/1", status: 404}, // requests that match no route share one key
		{path: "/nowhere/2", status: 429},
	}
	after := global.expect(0, nil)
	if a.GlobalBeforeRouting {
		steps = []step{
			{path: "/users/1", status: 200},
			{path: "/users/2", status: 200, peer: "198.51.100.9:4000"}, // by peer address
			{path: "/users/3", status: 429},
		}
		after = global.expect(3, keyfunc.ErrNoKey)
	}
	cs = append(cs, testCase[M]{
		name:   "keyfunc-route",
		global: []M{a.GCRA(rdb, core.PerMinute(1), prefix("keyfunc-route"), a.WithKey(keyfunc.Route()), a.WithErrorHandler(global.hook))},
		steps:  steps,
		after:  after,
	})

	// On one route, joined with the client: every adapter knows the route.
	route := &errorLog{}
	cs = append(cs, testCase[M]{
		name: "keyfunc-route-per-client",
		route: []M{a.GCRA(rdb, core.PerMinute(1), prefix("keyfunc-route-client"),
			a.WithKey(keyfunc.Join(keyfunc.RemoteIP(), keyfunc.Route())), a.WithErrorHandler(route.hook))},
		steps: []step{
			{path: "/limited/1", status: 200},
			{path: "/limited/2", status: 429},
			{path: "/limited/2", status: 200, peer: "198.51.100.9:4000"},
			{path: "/users/1", status: 200},
		},
		after: route.expect(0, nil),
	})
	return cs
}
