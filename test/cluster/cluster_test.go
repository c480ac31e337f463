package cluster

import (
	. "github.com/onsi/ginkgo/v2"
)

// One install, one example application, in the order a user meets them: each spec leaves
// the cluster as the next one expects it (the operator installed, then scaled, upgraded
// and finally uninstalled). A failed spec does not stop the rest, which say what else
// works.
var _ = Describe("Fusebox on a real node", Ordered, ContinueOnFailure, Label("cluster"), func() {
	BeforeAll(func() {
		connect()
		noteNetworkNamespace()
	})

	Describe("installed from its chart", installSpecs)
	Describe("the example application", exampleSpecs)
	Describe("the fuseboxd sidecar", sidecarSpecs)
	Describe("pod identity and the garbage collector", identitySpecs)
	Describe("config propagation", propagationSpecs)
	Describe(rolloutsContainer, Ordered, rolloutSpecs)
	Describe("leader election", failoverSpecs)
	Describe("upgrade and uninstall", upgradeSpecs)
})
