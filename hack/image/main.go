// Command image builds the Fusebox manager's container image without a
// container engine: it cross-compiles a static manager per platform, puts it
// on a minimal root filesystem (CA certificates, a nonroot user) and writes a
// multi-platform OCI image index, as an OCI layout directory, as a tarball
// `docker load` accepts, and optionally pushed to a registry. Same commit,
// same digest: see docs/image.md.
//
// -package and -entrypoint put another main package of the repository on the
// same root filesystem: `make image-example` builds examples/in-cluster this
// way, and hack/cluster.sh the pause program of its node (hack/pause).
//
// It is a module of its own so the operator's module does not depend on
// go-containerregistry.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		root       = flag.String("root", "../..", "The repository root (the operator's module).")
		pkg        = flag.String("package", "./cmd/manager", "The main package to put in the image, relative to -root.")
		entrypoint = flag.String("entrypoint", "/manager", "Where the binary goes in the image; the image runs it.")
		title      = flag.String("title", "fusebox-manager", "org.opencontainers.image.title label.")
		platforms  = flag.String("platforms", "linux/amd64,linux/arm64", "Comma-separated platforms of the image index.")
		ca         = flag.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of trusted CAs for /etc/ssl/certs (Debian's ca-certificates package).")
		tag        = flag.String("tag", "ghcr.io/fusebox-dev/fusebox:latest", "The image's name in the layout and the tarball, and where -push sends it.")
		layoutDir  = flag.String("layout", "bin/image", "Where to write the OCI image layout (replaced).")
		archive    = flag.String("archive", "bin/image.tar", "Where to write the tarball for `docker load` (\"\" for none).")
		push       = flag.Bool("push", false, "Also push the index to -tag, with the docker config's credentials.")
		source     = flag.String("source", "https://github.com/fusebox-dev/fusebox", "org.opencontainers.image.source label.")
		revision   = flag.String("revision", "", "org.opencontainers.image.revision label (default: git rev-parse HEAD).")
		version    = flag.String("version", "", "org.opencontainers.image.version label (default: git describe --tags --always --dirty).")
		epoch      = flag.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix time of every timestamp in the image (default: $SOURCE_DATE_EPOCH, else the commit's time).")
	)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	ref, err := name.ParseReference(*tag)
	if err != nil {
		return err
	}
	ps, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	opts, err := optionsFromGit(*root, *epoch, *revision, *version)
	if err != nil {
		return err
	}
	opts.Package, opts.Entrypoint, opts.Platforms, opts.CACertificates = *pkg, *entrypoint, ps, *ca
	opts.Labels["org.opencontainers.image.title"] = *title
	opts.Labels["org.opencontainers.image.source"] = *source

	started := time.Now()
	idx, err := Build(ctx, opts)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if err := WriteLayout(*layoutDir, idx, ref); err != nil {
		return fmt.Errorf("write %s: %w", *layoutDir, err)
	}
	fmt.Printf("%s@%s (%s, built in %s)\n", ref.Name(), digest, *platforms, time.Since(started).Round(time.Millisecond))
	fmt.Printf("  OCI layout: %s\n", *layoutDir)
	if *archive != "" {
		host := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
		if err := WriteArchive(*archive, *layoutDir, idx, host, ref, opts.Created); err != nil {
			return fmt.Errorf("write %s: %w", *archive, err)
		}
		fmt.Printf("  tarball:    %s (docker load -i %s)\n", *archive, *archive)
	}
	if *push {
		if _, err := Push(ctx, idx, ref); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Printf("  pushed:     %s@%s\n", ref.Context().Name(), digest)
	}
	return nil
}

// optionsFromGit fills in what a flag left empty from the repository: the
// commit's time (so the image's timestamps change only with the commit), its
// hash, and a version from its tags.
func optionsFromGit(root, epoch, revision, version string) (Options, error) {
	var err error
	if epoch == "" {
		if epoch, err = git(root, "log", "-1", "--format=%ct"); err != nil {
			return Options{}, err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return Options{}, fmt.Errorf("source date epoch %q: %w", epoch, err)
	}
	if revision == "" {
		if revision, err = git(root, "rev-parse", "HEAD"); err != nil {
			return Options{}, err
		}
	}
	if version == "" {
		if version, err = git(root, "describe", "--tags", "--always", "--dirty"); err != nil {
			return Options{}, err
		}
	}
	return Options{
		RepoRoot: root,
		Created:  time.Unix(secs, 0).UTC(),
		Labels: map[string]string{
			"org.opencontainers.image.revision": revision,
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.created":  time.Unix(secs, 0).UTC().Format(time.RFC3339),
		},
	}, nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
