"""Packs what scripts/dist.sh built into release artifacts, deterministically: the same binaries
give the same bytes (entries in a fixed order, every timestamp SOURCE_DATE_EPOCH, fixed modes,
no owner names), so that SHA256SUMS can be compared between two builds of one commit.

    python scripts/dist_pack.py --out DIR --version V --commit C --dirty false --profile P
        --rustc "rustc ..." --cargo-lambda "cargo-lambda ..." --skipped "arm64=reason;..."
        --built x86_64=LAMBDA_DIR [--built arm64=LAMBDA_DIR]
    python scripts/dist_pack.py unpack --release DIR --arch ARCH --into LAMBDA_DIR FUNCTION...
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import time
import zipfile
from pathlib import Path

FUNCTIONS = ("redriver", "archiver", "consumer", "redrive-workflow", "triage-widget", "triage-action")
CLI = "redrive"
# Written into the release directory by scripts/dist.sh (infra/standalone_template.py) before
# the packing: listed with the other artifacts, in the manifest and SHA256SUMS.
TEMPLATE = "redrive-attach.template.json"
REPO = Path(__file__).resolve().parent.parent


def epoch() -> int:
    # ZIP dates start in 1980.
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def zip_bootstrap(binary: Path) -> bytes:
    """A Lambda deployment package: `bootstrap` at the root, executable."""
    info = zipfile.ZipInfo("bootstrap", date_time=time.gmtime(epoch())[:6])
    info.external_attr = (0o100755 << 16)
    info.create_system = 3  # Unix, so that the mode is read
    info.compress_type = zipfile.ZIP_DEFLATED
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(info, binary.read_bytes(), compresslevel=6)
    return out.getvalue()


def tar_cli(binary: Path) -> bytes:
    """The CLI: `redrive` at the root of a .tar.gz, executable, owned by 0:0."""
    data = binary.read_bytes()
    info = tarfile.TarInfo(CLI)
    info.size, info.mode, info.mtime = len(data), 0o755, epoch()
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        t.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=epoch(), compresslevel=6) as g:
        g.write(raw.getvalue())
    return out.getvalue()


def unpack(release: Path, arch: str, bins: list[str], lambda_dir: Path) -> int:
    """`make deploy ARTIFACTS=DIR`: checks every file of a release against its SHA256SUMS, then
    unpacks each function's zip for `arch` into LAMBDA_DIR/<function>/bootstrap. Exit 1 with
    the reason on a missing or altered file, before anything is unpacked."""
    sums_file = release / "SHA256SUMS"
    if not sums_file.is_file():
        print(f"{release} holds no SHA256SUMS: name the directory make dist wrote (dist/redrive-VERSION)")
        return 1
    sums = {}
    for line in sums_file.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        sums[name] = digest
    for name, digest in sorted(sums.items()):
        path = release / name
        if not path.is_file():
            print(f"{path} is listed in SHA256SUMS but missing")
            return 1
        if sha256(path.read_bytes()) != digest:
            print(f"{path} does not match its SHA-256 in SHA256SUMS: download or build the release again")
            return 1
    zips = {}
    for name in bins:
        found = [n for n in sums if n.startswith("redrive-") and n.endswith(f"-{name}-{arch}.zip")
                 and not n.startswith("redrive-cli-")]
        if len(found) != 1:
            print(f"{release} has no {name} for {arch} (redrive-VERSION-{name}-{arch}.zip): "
                  f"set LAMBDA_ARCH to an architecture the release was built for")
            return 1
        zips[name] = release / found[0]
    for name, path in zips.items():
        target = lambda_dir / name
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(path) as z:
            (target / "bootstrap").write_bytes(z.read("bootstrap"))
        (target / "bootstrap").chmod(0o755)
    return 0


def main() -> int:
    if sys.argv[1:2] == ["unpack"]:
        u = argparse.ArgumentParser()
        u.add_argument("unpack")
        u.add_argument("--release", required=True, type=Path)
        u.add_argument("--arch", required=True)
        u.add_argument("--into", required=True, type=Path)
        u.add_argument("bins", nargs="+")
        a = u.parse_args()
        return unpack(a.release, a.arch, a.bins, a.into)
    p = argparse.ArgumentParser()
    for name in ("out", "version", "commit", "dirty", "profile", "rustc", "cargo-lambda", "skipped"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--built", action="append", default=[])
    a = p.parse_args()
    out = Path(a.out)
    artifacts = []
    for spec in a.built:
        arch, _, lambda_dir = spec.partition("=")
        for name in FUNCTIONS + (CLI,):
            binary = Path(lambda_dir) / name / "bootstrap"
            if not binary.is_file():
                raise SystemExit(f"dist: {binary} was not built")
            if name == CLI:
                file, kind, data = f"redrive-cli-{a.version}-linux-{arch}.tar.gz", "cli", tar_cli(binary)
            else:
                file, kind, data = f"redrive-{a.version}-{name}-{arch}.zip", "lambda", zip_bootstrap(binary)
            (out / file).write_bytes(data)
            artifacts.append({
                "file": file, "kind": kind, "binary": name, "arch": arch,
                "bytes": len(data), "sha256": sha256(data),
                "binarySha256": sha256(binary.read_bytes()),
            })
    template = out / TEMPLATE
    if template.is_file():
        data = template.read_bytes()
        artifacts.append({"file": TEMPLATE, "kind": "cloudformation-template", "bytes": len(data),
                          "sha256": sha256(data)})
    artifacts.sort(key=lambda x: x["file"])
    skipped = [
        {"arch": s.partition("=")[0], "reason": s.partition("=")[2]}
        for s in a.skipped.split(";") if s
    ]
    manifest = {
        "name": "redrive",
        "version": a.version,
        "commit": a.commit,
        "uncommittedChanges": a.dirty == "true",
        "sourceDateEpoch": epoch(),
        "profile": a.profile,
        "rustc": a.rustc,
        "cargoLambda": a.cargo_lambda,
        "cargoLockSha256": sha256((REPO / "Cargo.lock").read_bytes()),
        "build": "cargo lambda build --features redrive-consumer/http --bin "
                 + " --bin ".join(FUNCTIONS + (CLI,)) + f" --profile {a.profile} (per architecture)",
        "artifacts": artifacts,
        "skipped": skipped,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    sums = [(x["sha256"], x["file"]) for x in artifacts]
    sums.append((sha256((out / "manifest.json").read_bytes()), "manifest.json"))
    (out / "SHA256SUMS").write_text("".join(f"{h}  {f}\n" for h, f in sorted(sums, key=lambda s: s[1])), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
