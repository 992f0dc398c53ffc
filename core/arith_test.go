package core

import (
	"context"
	"math/rand"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The scripts divide with Lua's % (a - floor(a/b)*b in doubles), which
// lua/prelude.lua shows exact while |a| + b stays below 2^53. This runs
// helpers.lua's idiv, ceildiv and ttl_ms in a real Redis, whose Lua rounds
// as every deployed Redis does (miniredis's Lua computes % exactly, so it
// could not catch a wrong bound), on the quotients nearest to an integer:
// dividends one away from a multiple of b, up to 2^53 - b - 1, the largest
// the bound admits, and their negatives.
func TestScriptDivisionIsExact(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	src := string(mustReadLua("prelude.lua")) + string(mustReadLua("helpers.lua")) + `
local out = {}
for i = 1, #ARGV, 3 do
  local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  out[#out + 1] = format('%d', idiv(a, b))
  out[#out + 1] = format('%d', ceildiv(a, b))
  if ARGV[i + 2] == '1' then
    out[#out + 1] = ttl_ms(a, b)
  end
end
return out
`
	const limit = int64(1) << 53
	rng := rand.New(rand.NewSource(1))
	divisors := []int64{1, 2, 3, 7, 1000, 999_983, 1<<20 + 1, 1<<32 - 1, 1<<40 + 7, 1<<50 - 1}
	for i := 0; i < 20; i++ {
		divisors = append(divisors, 1+rng.Int63n(1<<50))
	}
	var args []interface{}
	type pair struct {
		a, b int64
		ttl  bool // also ttl_ms(a, b): a TTL of a ticks of b µs, below 2^52µs
	}
	var pairs []pair
	add := func(a, b int64) {
		if a+b >= limit || -a+b >= limit {
			return
		}
		p := pair{a, b, a >= 0 && b <= 1000 && a < (limit/2)/b}
		pairs = append(pairs, p)
		flag := "0"
		if p.ttl {
			flag = "1"
		}
		args = append(args, strconv.FormatInt(a, 10), strconv.FormatInt(b, 10), flag)
	}
	for _, b := range divisors {
		top := (limit - b - 1) / b * b // the largest multiple of b the bound admits
		for _, m := range []int64{top, top / 2, top / 3, top/b/7*b + b, b * 5, b, 0} {
			m -= m % b
			for _, d := range []int64{-1, 0, 1} {
				add(m+d, b)
				add(-(m + d), b)
			}
		}
		add(limit-b-1, b)
		for i := 0; i < 10; i++ {
			add(rng.Int63n(limit-b), b)
		}
	}
	got, err := c.Eval(ctx, src, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for _, p := range pairs {
		q := p.a / p.b
		if p.a%p.b != 0 && p.a < 0 {
			q-- // floor, not truncation
		}
		ceil := q
		if q*p.b != p.a {
			ceil++
		}
		want := []string{strconv.FormatInt(q, 10), strconv.FormatInt(ceil, 10)}
		if p.ttl {
			ms := (p.a*p.b + 999) / 1000
			want = append(want, strconv.FormatInt(max(ms, 1), 10))
		}
		for i, w := range want {
			if k >= len(got) {
				t.Fatalf("the script answered %d values; more expected", len(got))
			}
			if got[k] != w {
				t.Errorf("a=%d b=%d: value %d is %s, want %s", p.a, p.b, i, got[k], w)
			}
			k++
		}
	}
	if k != len(got) {
		t.Errorf("the script answered %d values, want %d", len(got), k)
	}
}
