#!/usr/bin/env bash
# Checks of what the package ships, run by ctest (label: appliance):
#
#   appliance_test.sh man    PROGRAM MAN_PAGE[.gz]        every option of --help is documented,
#                                                    the page renders without groff warnings
#   appliance_test.sh render PAGE...               each page renders without groff warnings
#   appliance_test.sh unit   VECFLOWD UNIT           systemd-analyze verify says nothing
#   appliance_test.sh completion FILE TRAFGEN [VECFLOWCTL]
#                                                    bash completion offers the subcommands
#                                                    and options the program's help lists
#   appliance_test.sh deb    BUILD_DIR               the .deb debian/rules makes from BUILD_DIR
#                                                    passes lintian and holds the FHS paths, its
#                                                    conffile, maintainer scripts and plugin
#                                                    dependencies
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

case "$1" in
  man)
    program=$2 page=$3
    if [[ "$page" == *.gz ]]; then
      zcat "$page" >"${TMPDIR:-/tmp}/vap-man.$$"
      page=${TMPDIR:-/tmp}/vap-man.$$
      trap 'rm -f "$page"' EXIT
    fi
    opts=$("$program" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u)
    [ -n "$opts" ] || fail "no options found in vecflowd --help"
    for o in $opts; do
      # troff escapes each dash of an option as \-
      grep -qF -- "$(printf '%s' "$o" | sed 's/-/\\-/g')" "$page" ||
        fail "$(basename "$program") $o is not documented in $page"
    done
    warnings=$(sed 's/@VERSION@/0/' "$page" | groff -man -ww -z 2>&1)
    [ -z "$warnings" ] || fail "groff warnings in $page:"$'\n'"$warnings"
    echo "ok: $(echo "$opts" | wc -l) options documented, page renders cleanly"
    ;;

  render)
    shift
    for page in "$@"; do
      warnings=$(sed 's/@VERSION@/0/' "$page" | groff -man -ww -z 2>&1)
      [ -z "$warnings" ] || fail "groff warnings in $page:"$'\n'"$warnings"
    done
    echo "ok: $# pages render cleanly"
    ;;

  unit)
    vecflowd=$2 unit=$3
    # The unit exactly as shipped, except that it starts the vecflowd of this build tree
    # (systemd-analyze checks that ExecStart= names an executable).
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # The same for its hugepage helper, which lies beside the unit in the source tree.
    sed -e "s|/usr/sbin/vecflowd|$vecflowd|g" \
        -e "s|/usr/libexec/vecflow/vecflow-hugepages|$(realpath "$(dirname "$unit")")/vecflow-hugepages|g" \
        "$unit" >"$tmp/$(basename "$unit")"
    # verify exits 0 on unknown keys and bad values: any message at all is a failure.
    out=$(systemd-analyze verify --man=no "$tmp/$(basename "$unit")" 2>&1) ||
      fail "systemd-analyze verify failed: $out"
    [ -z "$out" ] || fail "systemd-analyze verify: $out"
    echo "ok: systemd-analyze verify accepts $(basename "$unit")"
    ;;

  completion)
    file=$2 trafgen=$3 vecflowctl=${4:-}
    # shellcheck disable=SC1090
    source "$file"
    complete_words() {  # words...: prints what completing the last word offers
      COMP_WORDS=("$@")
      COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
      _vecflowctl
      echo "${COMPREPLY[*]}"
    }
    expect() {  # expected-words -- words...
      local want=$1 got
      shift
      got=$(complete_words "$@")
      [ "$got" = "$want" ] || fail "completing '$*' offered '$got', expected '$want'"
    }
    # The mechanism, on a CLI11 program with subcommands that is always built.
    expect "send recv pcap replay" "$trafgen" ""
    expect "send" "$trafgen" se
    expect "--dev --dst --dst-mac --dst-port --duration" "$trafgen" send --d
    expect "--idle-exit" "$trafgen" recv --dev eth0 --id
    if [ -n "$vecflowctl" ]; then
      expect "status" "$vecflowctl" stat
      expect "--json" "$vecflowctl" --js
      complete_words "$vecflowctl" "" | grep -qw reload || fail "vecflowctl: no reload offered"
      # Values the help lists for an option and for a positional.
      expect "rx tx both" "$vecflowctl" capture start wan --direction ""
      expect "counters errors runtime" "$vecflowctl" clear ""
      expect "parts ports" "$vecflowctl" names p
      # Names of a running appliance: none when nothing answers at the socket.
      expect "" "$vecflowctl" -s /nonexistent/vecflow.sock trace add 1 --port ""
    fi
    echo "ok: completion follows the programs' help"
    ;;

  deb)
    build=$2
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # The package debian/rules makes from this build tree (no compiling), checked by lintian
    # (-I -E --pedantic, no error or warning); images/package-check.sh without --prebuilt is
    # the full dpkg-buildpackage.
    "$(dirname "$0")/../../images/package-check.sh" --prebuilt "$build" --out "$tmp" ||
      fail "package-check.sh --prebuilt failed"
    deb=$(ls "$tmp"/vecflow_*_amd64.deb)
    dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$tmp/files"
    for f in /usr/sbin/vecflowd /lib/systemd/system/vecflowd.service \
             /usr/lib/sysusers.d/vecflow.conf /usr/lib/tmpfiles.d/vecflow.conf \
             /usr/libexec/vecflow/vecflow-hugepages /usr/lib/systemd/network/70-vecflow-kernel-path.link \
             /etc/vecflow/appliance.yaml \
             /usr/share/doc/vecflow/reference.yaml /usr/share/man/man8/vecflowd.8.gz \
             /usr/share/man/man5/vecflow.yaml.5.gz /usr/share/man/man7/vecflow-control.7.gz; do
      grep -qx -- "$f" "$tmp/files" || fail "$f missing from the package"
    done
    if [ -x "$build/tools/vecflowctl/vecflowctl" ]; then
      for f in /usr/bin/vecflowctl /usr/share/bash-completion/completions/vecflowctl \
               /usr/share/man/man1/vecflowctl.1.gz; do
        grep -qx -- "$f" "$tmp/files" || fail "$f missing from the package"
      done
    fi
    # Every BPF object of the build is shipped.
    while read -r obj; do
      grep -qx -- "/usr/lib/vecflow/bpf/$(basename "$obj")" "$tmp/files" ||
        fail "$(basename "$obj") missing from /usr/lib/vecflow/bpf"
    # (build/bpf only: images and package checks keep chroots under build/ too.)
    done < <(find "$build/bpf" -name '*.bpf.o')
    # Nothing outside the FHS places a package may use.
    bad=$(grep -vE '^/(etc/vecflow|lib/systemd/system|usr/(s?bin|lib|libexec|share))(/|$)|^/(etc|lib|usr)?/?$' \
          "$tmp/files" | grep -v '/$' || true)
    [ -z "$bad" ] || fail "files outside the expected paths: $bad"
    # Binaries are stripped.
    dpkg-deb -x "$deb" "$tmp/root"
    file "$tmp/root/usr/sbin/vecflowd" | grep -q 'stripped' &&
      ! file "$tmp/root/usr/sbin/vecflowd" | grep -q 'not stripped' ||
      fail "vecflowd is not stripped"
    # The control archive is unpacked once: piping dpkg-deb into a reader that stops early
    # (grep -q, tar at its end marker) makes dpkg-deb fail on SIGPIPE under pipefail.
    mkdir "$tmp/control"
    dpkg-deb -e "$deb" "$tmp/control"
    for s in postinst prerm postrm; do
      [ -x "$tmp/control/$s" ] || fail "no executable $s"
      sh -n "$tmp/control/$s" || fail "$s does not parse"
    done
    [ "$(cat "$tmp/control/conffiles")" = /etc/vecflow/appliance.yaml ] ||
      fail "conffiles must list /etc/vecflow/appliance.yaml"
    depends=$(dpkg-deb -f "$deb" Depends)
    # shlibdeps found the linked libraries; the EAL plugins the default appliance file needs
    # are declared by name (debian/control), the test and example drivers are not Depends.
    for d in librte-eal23 libsystemd0 libyaml-cpp librte-mempool-ring23 librte-bus-vdev23 \
             librte-net-af-xdp23 systemd; do
      grep -q -- "$d" <<<"$depends" || fail "Depends lacks $d: $depends"
    done
    for d in librte-net-pcap23 librte-net-null23 librte-net-ring23 librte-net-tap23 \
             librte-net-vhost23 librte-event-sw23 librte-event-dsw23; do
      if grep -q -- "$d" <<<"$depends"; then fail "Depends names $d (a test or example driver)"; fi
    done
    echo "ok: $(basename "$deb"): $(wc -l <"$tmp/files") paths, Depends: $depends"
    ;;

  *) echo "usage: $0 man|unit|deb ..." >&2; exit 2 ;;
esac
