// bin/ holds what the Makefile and hack/ build and run: tools, binaries, images and the
// local cluster's state, which the cluster changes while a go command may be walking
// the tree (.ci/run runs the cluster suite beside make test). This file makes bin/ a
// module of its own, outside go.work, so that ./... patterns stop at it.
module fusebox.invalid/bin
