package counting

import (
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// groupMember is a closed pod whose breaker Group reports keys.
func groupMember(pod string, keys, open, halfOpen int32, worst ...string) member {
	m := at(pod, closed, started, 0)
	m.entry.Keys = &resiliencev1alpha1.KeySummary{Keys: keys, Open: open, HalfOpen: halfOpen, Worst: worst}
	return m
}

// A breaker Group is one entry per pod; the status adds the entries up.
func TestAggregateKeys(t *testing.T) {
	cb := podBreaker(1)
	if v := Aggregate(cb, entriesOf(closedPods("p", 3)...)); v.Keys != nil {
		t.Errorf("no Group: keys %+v, want none", v.Keys)
	}
	members := []member{
		groupMember("a", 40, 3, 1, "h1", "h2", "h3", "h9"),
		groupMember("b", 55, 2, 0, "h2", "h3"),
		groupMember("c", 12, 0, 0),
		groupMember("d", 30, 4, 2, "h3", "h4", "h5", "h6", "h7"),
		at("e", closed, started, 0), // a pod whose agent predates Groups
	}
	v := Aggregate(cb, entriesOf(members...))
	want := resiliencev1alpha1.KeySummary{Keys: 55, Open: 9, HalfOpen: 3, Worst: []string{"h3", "h2", "h1", "h4", "h5"}}
	if v.Keys == nil || !equality.Semantic.DeepEqual(*v.Keys, want) {
		t.Errorf("keys %+v, want %+v", v.Keys, want)
	}
	if v.Members[0].Keys == nil || v.Members[0].Keys == members[0].entry.Keys {
		t.Errorf("member keys %+v, want a copy of the pod's", v.Members[0].Keys)
	}
	if v := Aggregate(cb, entriesOf(groupMember("a", 3, 0, 0))); v.Keys == nil || v.Keys.Keys != 3 || v.Keys.Worst != nil {
		t.Errorf("a quiet Group: %+v", v.Keys)
	}
}

// A frozen status: sums of what the reports say stay inside int32 and at or above 0, so
// the status schema never refuses the write.
func TestAggregateKeysCannotOverflow(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		members                  []member
		wantKeys, wantOpen, want int32
	}{
		{"2^31-1 counts", []member{groupMember("a", math.MaxInt32, math.MaxInt32, 1), groupMember("b", math.MaxInt32, 1, math.MaxInt32)}, breakerconfig.MaxKeyCount, breakerconfig.MaxKeyCount + 1, breakerconfig.MaxKeyCount - 1},
		{"open and halfOpen beyond the pod's keys count as its keys", []member{groupMember("a", 5, math.MaxInt32, 1), groupMember("b", 5, 1, math.MaxInt32)}, 5, 6, 4},
		{"negative counts count as 0", []member{groupMember("a", -4, -7, -1), groupMember("b", 2, 3, 1)}, 2, 2, 0},
		{"ordinary sums", []member{groupMember("a", 10, 2, 1), groupMember("b", 12, 3, 0)}, 12, 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := aggregateKeys(entriesOf(tc.members...))
			if k == nil || k.Keys != tc.wantKeys || k.Open != tc.wantOpen || k.HalfOpen != tc.want {
				t.Errorf("keys %+v, want keys %d open %d halfOpen %d", k, tc.wantKeys, tc.wantOpen, tc.want)
			}
		})
	}
	// 5,000 pods at the bound, every key open: the sum fits int32.
	many := make([]member, 5000)
	for i := range many {
		many[i] = groupMember("p", breakerconfig.MaxKeyCount, breakerconfig.MaxKeyCount, 0)
	}
	if k := aggregateKeys(entriesOf(many...)); k.Open != 5000*breakerconfig.MaxKeyCount || k.Keys != breakerconfig.MaxKeyCount {
		t.Errorf("5,000 pods at the bound: %+v", k)
	}
	// 100,000 pods at the bound: more than int32 holds, saturated rather than wrapped.
	nodes := make([]Entry, 100)
	for i := range nodes {
		nodes[i] = Entry{Node: "n", Pods: 1000, Closed: 1000, Keys: &Keys{Keys: 1000 * breakerconfig.MaxKeyCount, Open: 1000 * breakerconfig.MaxKeyCount, Most: breakerconfig.MaxKeyCount}}
	}
	if k := aggregateKeys(nodes); k.Open != math.MaxInt32 || k.Keys != breakerconfig.MaxKeyCount {
		t.Errorf("100,000 pods at the bound: %+v", k)
	}
}

// One pod, one share (issue 29): a pod's Group counts at most maxShareOfMedian times the
// median pod's keys (at least minKeysBound), and names each worst key once.
func TestAggregateKeysCountsABoundedShare(t *testing.T) {
	group := func(pod string, keys, open int32, worst ...string) member {
		return groupMember(pod, keys, open, 0, worst...)
	}
	var fleet []member
	for i := range 9 {
		fleet = append(fleet, group(string(rune('a'+i)), 100, 10, "h1", "h2"))
	}
	fleet = append(fleet, group("rogue", breakerconfig.MaxKeyCount, breakerconfig.MaxKeyCount/2, "evil", "evil", "evil", "evil", "evil"))
	k := aggregateKeys(entriesOf(fleet...))
	bound := int32(maxShareOfMedian * minKeysBound)
	want := resiliencev1alpha1.KeySummary{Keys: bound, Open: 9*10 + bound/2, Worst: []string{"h1", "h2", "evil"}}
	if !equality.Semantic.DeepEqual(*k, want) {
		t.Errorf("keys %+v, want %+v", *k, want)
	}
	// A fleet of large Groups is not scaled down by the bound's floor.
	big := []member{group("a", 300_000, 0), group("b", 200_000, 0), group("c", 250_000, 0)}
	if k := aggregateKeys(entriesOf(big...)); k.Keys != 300_000 {
		t.Errorf("large Groups: %+v", k)
	}
}
