package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// runLegacy runs the command line of the release before the subcommands, `fuseboxd
// [flags]`, `fuseboxd --node [flags]` or `fuseboxd --probe --socket PATH`, after one line
// on stderr that says what to run instead. It takes every old flag whatever the mode, as
// the old command did, and goes in the release after this one.
func runLegacy(args []string, stderr io.Writer) error {
	var (
		s               serveConfig
		n               nodeConfig
		asNode, asProbe bool
	)
	fs := flag.NewFlagSet("fuseboxd", flag.ExitOnError)
	fs.SetOutput(stderr)
	s.register(fs)
	fs.StringVar(&n.listen, "node-listen", fmt.Sprintf(":%d", breakerconfig.NodeAgentPort), "with --node: the address to serve the node's pods on (now: fuseboxd node --listen)")
	fs.BoolVar(&asNode, "node", false, "run as the node agent (now: fuseboxd node)")
	fs.BoolVar(&asProbe, "probe", false, "check that a daemon serves on --socket (now: fuseboxd probe)")
	fs.Usage = func() {
		_, _ = io.WriteString(stderr, usage+"\nThe flags of the release before the commands, which work for one more release:\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args) // ExitOnError
	switch {
	case asProbe:
		deprecated(stderr, "fuseboxd --probe", "fuseboxd probe", "")
		return probe(s.socket)
	case asNode:
		deprecated(stderr, "fuseboxd --node", "fuseboxd node", " (--node-listen is its --listen)")
		n.kubeconfig, n.grace, n.debug = s.kubeconfig, s.grace, s.debug
		return node(n)
	}
	deprecated(stderr, "fuseboxd without a command", "fuseboxd serve", "")
	return serve(s)
}

// deprecated is the line an old command line prints first.
func deprecated(stderr io.Writer, old, now, note string) {
	_, _ = fmt.Fprintf(stderr, "fuseboxd: %s is deprecated and goes in the next release: run `%s` with the same flags%s\n", old, now, note)
}
