#!/usr/bin/env bash
# Unpacks the .debs of scripts/device_bundle.sh into a private prefix and sets
# up the environment to build and run terngrad against it. Meant for the lent
# GPU machine (no network, none of our -dev packages); idempotent.
#
#   source scripts/unpack_device_deps.sh    exports the variables below (gpu_checks.sh does this)
#   bash scripts/unpack_device_deps.sh      unpacks and prints them as export lines
#
# Bundle: $TG_DEVICE_DEPS (default <repo>/.device-deps): debs/*.deb in, root/ out.
# Every .deb is unpacked with `dpkg -x` (or ar + tar where dpkg is missing)
# into root/ -- never into /, which can break the machine's image. Then:
#   - absolute symbolic links (zlib1g-dev's libz.so -> /lib/...) are pointed
#     into the prefix;
#   - the pkg-config files (re2.pc, read by gRPC's Findre2 through
#     pkg-config, and the others) name /usr: rewritten to the prefix;
#   - the CMake package files are relocatable (_IMPORT_PREFIX is computed from
#     their own location); any absolute /usr/include or /usr/lib/<arch>/lib...
#     literal in them would be rewritten too (Debian 12's have none).
# A stamp (the .deb list and the prefix's path) skips all this when nothing
# changed; a moved checkout or a new bundle unpacks afresh.
#
# Exported:
#   TG_DEPS_ROOT             the unpacked tree (its usr/ is the prefix)
#   CMAKE_PREFIX_PATH        <root>/usr prepended (finds Eigen3, gRPC, absl,
#                            GTest, benchmark configs; ZLIB, OpenSSL, c-ares,
#                            protobuf libraries and headers)
#   PATH                     <root>/usr/bin prepended (protoc, grpc_cpp_plugin, pkgconf)
#   LD_LIBRARY_PATH          <root>/usr/lib/<arch> and <root>/lib/<arch> prepended
#                            (protoc at build time; the binaries at run time)
#   PKG_CONFIG, PKG_CONFIG_PATH   the bundle's pkgconf and .pc files
#   TG_DEPS_CMAKE_ARGS       hints for FindProtobuf and FindPkgConfig, to add
#                            to the cmake configure line (word-split it)
#   TG_FASHION_MNIST_DIR     the Fashion-MNIST IDX files (dataset-fashion-mnist)
#   TG_ORIG_LD_LIBRARY_PATH  LD_LIBRARY_PATH as it was before (for programs,
#                            such as python3, that need not see the bundle)

_tg_unpack_main() {
  local here repo deps debs root arch stamp want f
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  repo=$(dirname "$here")
  deps=${TG_DEVICE_DEPS:-$repo/.device-deps}
  deps=$(cd "$deps" 2>/dev/null && pwd) || { echo "unpack_device_deps: no bundle at ${TG_DEVICE_DEPS:-$repo/.device-deps}" >&2; return 1; }
  debs=$deps/debs
  root=$deps/root
  arch=x86_64-linux-gnu
  if ! compgen -G "$debs/*.deb" >/dev/null; then
    echo "unpack_device_deps: no .deb files in $debs (run scripts/device_bundle.sh where the registry is reachable)" >&2
    return 1
  fi

  stamp=$root/.unpacked
  want=$(printf '%s\n' "prefix $root" && cd "$debs" && ls -l --time-style=+%s -- *.deb | awk '{print $5, $6, $7}')
  if [[ ! -f "$stamp" ]] || [[ "$(cat "$stamp")" != "$want" ]]; then
    echo "unpack_device_deps: unpacking $(ls "$debs"/*.deb | wc -l) packages into $root" >&2
    rm -rf "$root" "$root.tmp"
    mkdir -p "$root.tmp"
    for f in "$debs"/*.deb; do
      if command -v dpkg >/dev/null; then
        dpkg -x "$f" "$root.tmp" || return 1
      else  # a .deb is an ar archive holding data.tar.{xz,zst,gz}
        local t
        t=$(mktemp -d)
        (cd "$t" && ar x "$f" && tar -xf data.tar.* -C "$root.tmp") || { rm -rf "$t"; return 1; }
        rm -rf "$t"
      fi
    done
    # Absolute links -> the same path inside the prefix (or its /usr-merged twin).
    local link target
    while IFS= read -r -d '' link; do
      target=$(readlink "$link")
      [[ "$target" == /* ]] || continue
      if [[ -e "$root.tmp$target" ]]; then
        ln -sfn "$root$target" "$link"
      elif [[ -e "$root.tmp/usr$target" ]]; then
        ln -sfn "$root/usr$target" "$link"
      elif [[ "$target" == /usr/* && -e "$root.tmp${target#/usr}" ]]; then
        ln -sfn "$root${target#/usr}" "$link"
      else
        echo "unpack_device_deps: warning: $link -> $target points outside the bundle" >&2
      fi
    done < <(find "$root.tmp" -type l -print0)
    # pkg-config files: variables and flags that name /usr.
    local pc
    while IFS= read -r -d '' pc; do
      sed -i -E -e "s#^([A-Za-z_]+)=/usr(/|\$)#\\1=$root/usr\\2#" \
                -e "s#(-[IL])/usr/#\\1$root/usr/#g" "$pc"
    done < <(find "$root.tmp" -name '*.pc' -type f -print0)
    # CMake package files: header and library paths spelled out as /usr/...
    local cm
    while IFS= read -r -d '' cm; do
      sed -i -E "s#([\";])/usr/(include|lib/$arch/lib)#\\1$root/usr/\\2#g" "$cm"
    done < <(find "$root.tmp/usr/lib/$arch/cmake" "$root.tmp/usr/share" -name '*.cmake' -type f -print0 2>/dev/null)
    mv "$root.tmp" "$root"
    printf '%s\n' "$want" > "$stamp"
  fi

  export TG_DEPS_ROOT=$root
  export TG_ORIG_LD_LIBRARY_PATH=${TG_ORIG_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}
  case ":${CMAKE_PREFIX_PATH:-}:" in *":$root/usr:"*) ;; *)
    export CMAKE_PREFIX_PATH=$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH} ;; esac
  case ":$PATH:" in *":$root/usr/bin:"*) ;; *) export PATH=$root/usr/bin:$PATH ;; esac
  case ":${LD_LIBRARY_PATH:-}:" in *":$root/usr/lib/$arch:"*) ;; *)
    export LD_LIBRARY_PATH=$root/usr/lib/$arch:$root/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
  export PKG_CONFIG=$root/usr/bin/pkgconf
  case ":${PKG_CONFIG_PATH:-}:" in *":$root/usr/lib/$arch/pkgconfig:"*) ;; *)
    export PKG_CONFIG_PATH=$root/usr/lib/$arch/pkgconfig:$root/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} ;; esac
  export TG_DEPS_CMAKE_ARGS="-DProtobuf_PROTOC_EXECUTABLE=$root/usr/bin/protoc -DProtobuf_INCLUDE_DIR=$root/usr/include -DProtobuf_LIBRARY=$root/usr/lib/$arch/libprotobuf.so -DPKG_CONFIG_EXECUTABLE=$root/usr/bin/pkgconf"
  export TG_FASHION_MNIST_DIR=$root/usr/share/datasets/fashion-mnist
}

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then  # sourced
  _tg_unpack_main
else
  set -euo pipefail
  _tg_unpack_main
  for v in TG_DEPS_ROOT CMAKE_PREFIX_PATH PATH LD_LIBRARY_PATH PKG_CONFIG PKG_CONFIG_PATH \
           TG_DEPS_CMAKE_ARGS TG_FASHION_MNIST_DIR TG_ORIG_LD_LIBRARY_PATH; do
    printf 'export %s=%q\n' "$v" "${!v}"
  done
fi
