// Command fuseboxd is two programs of Fusebox's in one binary, each a subcommand:
//
//	fuseboxd serve [flags]   the per-pod decision sidecar (docs/design.md §8)
//	fuseboxd node [flags]    the node agent, one per node (docs/design.md §9)
//	fuseboxd probe [flags]   the sidecar's startup probe: exit 0 once serve answers
//
// `serve` runs the pod's breakers with pkg/breaker/kube, as a Go application would, and
// serves them to programs in any language over a Unix socket. In a pod it reads the
// cluster as kube.FromEnvironment does (POD_NAME, POD_NAMESPACE, POD_UID from the
// downward API) and writes the pod's BreakerReport, or, with FUSEBOX_NODE_AGENT set,
// streams its config from its node's agent and reports there. With --config-dir it needs
// no API server: it reads the rendered config from DIR/<name>.json, laid out as the
// mounted fusebox-breakers ConfigMap, hot-reloads it, and reports nowhere.
//
// `node` is the node agent (internal/nodeagent): it serves every pod of its node on
// --listen, carrying their reports and config.
//
// The flags of the release before the subcommands (`fuseboxd [flags]` for serve,
// `fuseboxd --node` for the node agent, `fuseboxd --probe`) keep working for one release
// and say on stderr what to run instead.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "fuseboxd:", strings.TrimPrefix(err.Error(), "fuseboxd: "))
		}
		os.Exit(1)
	}
}

// errUsage is a command line that named no subcommand fuseboxd has; the usage is printed.
var errUsage = errors.New("fuseboxd: usage")

const usage = `usage: fuseboxd <command> [flags]

commands:
  serve   the per-pod decision sidecar: serve the pod's breakers on a Unix socket
  node    the node agent: carry the reports and config of every pod of this node
  probe   exit 0 if a sidecar serves on --socket (the injected sidecar's startup probe)

Run 'fuseboxd <command> -h' for a command's flags.
`

// run runs the subcommand args name, or the flags of the release before them.
func run(args []string, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "serve":
			return runServe(args[1:])
		case "node":
			return runNode(args[1:])
		case "probe":
			return runProbe(args[1:])
		case "help", "-h", "-help", "--help":
			_, _ = io.WriteString(stderr, usage)
			return nil
		}
		if !strings.HasPrefix(args[0], "-") {
			_, _ = fmt.Fprintf(stderr, "fuseboxd: unknown command %q\n%s", args[0], usage)
			return errUsage
		}
	}
	return runLegacy(args, stderr)
}

// parse parses the flags of the command named, which register sets up; a bad flag ends
// the process with the command's usage (flag.ExitOnError).
func parse(command string, args []string, register func(*flag.FlagSet)) {
	fs := flag.NewFlagSet("fuseboxd "+command, flag.ExitOnError)
	register(fs)
	_ = fs.Parse(args)
}

// newLogger is the daemons' JSON log on stderr, at debug level with --debug.
func newLogger(debug bool) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	return log
}
