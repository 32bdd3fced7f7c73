"""`rtenv cache ls|gc|purge`: inspect and clean the rtenv store, an agent, or Ray nodes."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rtenv_cli.cli.options import DryRunOpt, FormatOpt, TextJson, YesOpt, address_option
from rtenv_cli.render.output import Output

if TYPE_CHECKING:
    from rtenv_cli.core.transport.resolve import Address

cache_app = typer.Typer(
    name="cache", no_args_is_help=True, rich_markup_mode=None,
    help="Inspect and clean environment caches: the embedded store, an rtenv agent, Ray nodes."
    "\n\nExample:\n\n    $ rtenv cache ls\n\n    $ rtenv cache gc --older-than 7d --yes",
)

class Kind(str, Enum):
    """What the store and push's build cache hold (`cache ls` prints it per entry)."""

    working_dir = "working_dir"
    py_modules = "py_modules"
    pip = "pip"
    uv = "uv"
    package = "package"
    blob = "blob"
    build_cache = "build-cache"
    conda = "conda"  # Ray's own caches only (cache ls --address)
    java_jars = "java_jars"  # Ray's own caches only


class Use(str, Enum):
    in_use = "in-use"
    unused = "unused"


class Part(str, Enum):
    ray = "ray"
    rtenv = "rtenv"


AgentOpt = Annotated[str | None, typer.Option(
    "--agent", envvar="RTENV_AGENT_URL", show_envvar=True,
    help="URL of an rtenv agent. Default: the embedded store.")]
TokenOpt = Annotated[str | None, typer.Option(
    "--token", envvar="RTENV_AGENT_TOKEN", show_envvar=True, help="Bearer token for the agent.")]
_WHERE = ("a Ray cluster (its GCS host:6379, its dashboard http://host:8265, or auto for the "
          "one `ray start` started here)")
LsAddressOpt = Annotated[str | None, address_option(
    f"What to list: {_WHERE}, every node's runtime_env caches; or an rtenv agent URL. "
    "Default: the embedded store.")]
CleanAddressOpt = Annotated[str | None, address_option(
    f"What to clean: {_WHERE}, whose nodes lose their old sessions' caches; or an rtenv agent "
    "URL. Default: the embedded store.")]
KindOpt = Annotated[list[Kind] | None, typer.Option(
    "--kind", case_sensitive=False, help="Only entries of this kind (repeatable).")]


def _kinds(kind: list[Kind] | None) -> tuple[str, ...]:
    return tuple(k.value for k in kind or ())


@cache_app.command("ls")
def ls(
    *,
    agent: AgentOpt = None, token: TokenOpt = None, address: LsAddressOpt = None,
    kind: KindOpt = None,
    use: Annotated[Use | None, typer.Option(
        "--use", case_sensitive=False, help="Only entries something holds (in-use: a live "
        "reference or a fresh upload's pin) or nothing holds (unused: what `cache gc` may "
        "remove).", show_default=False)] = None,
    node: Annotated[list[str] | None, typer.Option(
        "--node", metavar="ID|IP", help="With --address of a Ray cluster: only this node, by "
        "its ID (or a prefix of 4+ hex digits, as listed) or its IP address (repeatable).",
        show_default=False)] = None,
    only: Annotated[Part | None, typer.Option(
        "--only", case_sensitive=False, help="With --address of a Ray cluster: only Ray's own "
        "caches (ray) or only the environments rtenv's plugin built and the trees its nodes "
        "hold (rtenv).", show_default=False)] = None,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """List cached entries: kind, label, URI or key, size, references, created, last used.

    With --address of a Ray cluster, lists per node what Ray's agent reports joined with what is
    on each node's disk, including old sessions' caches Ray never deletes, and the environments
    rtenv's runtime_env plugin built in the node's rtenv store. --kind, --use, --node and
    --only narrow what is listed (the totals are those of what is shown).

    Example:

        $ rtenv cache ls

        $ rtenv cache ls --format json --kind uv --use unused

        $ rtenv cache ls --address http://127.0.0.1:8265

        $ rtenv cache ls --address 127.0.0.1:6379 --only rtenv --kind pip --node 10.0.0.7
    """
    out = Output(fmt.value)
    from rtenv_cli.core.cache.backends import cache_address
    from rtenv_cli.core.cache.filters import CacheFilter

    wanted = CacheFilter(kinds=_kinds(kind), use=use.value if use else None,
                         nodes=tuple(node or ()), only=only.value if only else None)
    where = cache_address(agent, address)
    if wanted.cluster_only and not where.is_ray:
        where.close()
        from rtenv_cli.core.errors import UsageError

        raise UsageError("--node and --only select the nodes of a Ray cluster",
                         hint="add --address <head>:6379 (or the dashboard URL)")
    if where.is_ray:
        where.close()
        from rtenv_cli.core.cache.ray_nodes import list_ray_nodes
        from rtenv_cli.render.cache import render_ray_nodes

        with out.status(f"measuring the runtime_env caches of every node of {where.value}"):
            listing = list_ray_nodes(where.value)
        listing = wanted.ray_nodes(_with_tree_refs(listing, where))
        out.result(listing, render_ray_nodes)
        _node_errors(out, listing.errors)
        return
    from rtenv_cli.core.cache.backends import open_backend
    from rtenv_cli.render.cache import render_listing

    out.result(wanted.listing(open_backend(where, token).listing(_kinds(kind))), render_listing)


def _clean(out: Output, *, agent: str | None, token: str | None, address: str | None,
           dry_run: bool, yes: bool, purge: bool, older_than: str | None = None,
           keep_storage: str | None = None, kinds: tuple[str, ...] = ()) -> None:
    from rtenv_cli.core.cache.backends import cache_address, open_backend
    from rtenv_cli.core.units import parse_duration, parse_size
    from rtenv_cli.render.cache import render_gc, render_plan

    older = parse_duration(older_than) if older_than else None
    keep = parse_size(keep_storage) if keep_storage else None
    where = cache_address(agent, address)
    store_older = older if purge or older is not None or keep is not None \
        else parse_duration("24h")
    rtenv_gc: dict[str, object] = {"purge": purge, "older_than_s": None if purge else store_older,
                "keep_storage": keep, "kinds": list(kinds)}
    if where.is_ray:
        where.close()
        _gc_trees(out, where, dry_run=dry_run, purge=purge)
        _clean_ray(out, address=where.value, dry_run=dry_run, yes=yes,
                   older=None if purge else older, rtenv_gc=rtenv_gc)
        return
    older = store_older
    backend = open_backend(where, token)
    plan = backend.gc(dry_run=True, older_than_s=older, keep_storage=keep, kinds=kinds,
                      purge=purge)
    if dry_run or not plan.plan.remove:
        out.result(plan, render_gc)
        return
    if not out.is_machine:
        render_plan(out, plan)
    if not out.confirm(f"Remove {len(plan.plan.remove)} entries?", yes=yes):
        out.message("Nothing removed")
        raise typer.Exit(1)
    result = backend.gc(dry_run=False, older_than_s=older, keep_storage=keep, kinds=kinds,
                        purge=purge)
    out.result(result, render_gc)


def _with_tree_refs(listing: Any, where: Address) -> Any:
    """`listing` with the nodes' tree references (`r:` keys), read through the cluster's GCS
    (a dashboard's: as it names it); without them when that GCS does not answer here."""
    import dataclasses

    from rtenv_cli.core.transport.ray_kv import NoGcsRoute, RayKV
    from rtenv_cli.core.trees.gc import tree_refs

    try:
        kv = RayKV.of_address(where)
    except NoGcsRoute:
        return listing
    try:
        return dataclasses.replace(listing, tree_refs=tree_refs(kv))
    finally:
        kv.close()


def _gc_trees(out: Output, where: Address, *, dry_run: bool, purge: bool) -> None:
    """The cluster's KV: trees (rtenv push's tree path) that no live worker holds and no push
    of the grace period (10 min; none with purge) names. Through the cluster's GCS (a
    dashboard's: as it names it)."""
    from rtenv_cli.core.transport.ray_kv import NoGcsRoute, RayKV
    from rtenv_cli.core.trees.gc import GRACE_S, collect
    from rtenv_cli.render.units import human_bytes

    try:
        kv = RayKV.of_address(where)
    except NoGcsRoute as exc:
        out.message(f"note: trees in the cluster's KV were not collected: {exc.message}")
        return
    try:
        done = collect(kv, grace_s=0 if purge else GRACE_S, dry_run=dry_run)
    finally:
        kv.close()
    verb = "would remove" if dry_run else "removed"
    out.message(f"trees: {verb} {len(done.manifests_removed)} manifests and "
                f"{len(done.packs_removed)} packs ({human_bytes(done.bytes_removed)}); kept "
                f"{done.manifests_kept} manifests ({len(done.held)} held by live workers)")


def _clean_ray(out: Output, *, address: str, dry_run: bool, yes: bool,
               older: float | None, rtenv_gc: dict[str, object]) -> None:
    from rtenv_cli.core.cache.ray_nodes import clean_ray_nodes
    from rtenv_cli.render.cache import render_ray_clean

    with out.status(f"measuring the runtime_env caches of every node of {address}"):
        plan = clean_ray_nodes(address, dry_run=True, older_than_s=older, rtenv_gc=rtenv_gc)
    if dry_run or not (plan.removable or plan.rtenv_removable):
        out.result(plan, render_ray_clean)
        _node_errors(out, plan.errors)
        return
    if not out.is_machine:
        render_ray_clean(out, plan)
    what = f"{len(plan.removable)} old Ray session caches and {plan.rtenv_removable} rtenv " \
        "store entries"
    if not out.confirm(f"Delete {what}?", yes=yes):
        out.message("Nothing removed")
        raise typer.Exit(1)
    with out.status(f"deleting old sessions' caches on every node of {address}"):
        done = clean_ray_nodes(address, dry_run=False, older_than_s=older, rtenv_gc=rtenv_gc)
    out.result(done, render_ray_clean)
    _node_errors(out, done.errors)


def _node_errors(out: Output, errors: tuple[str, ...]) -> None:
    """Each node's failure as one line on stderr; any makes the command fail."""
    for line in errors:
        out.stderr.write(f"error: {line}\n")
    if errors:
        raise typer.Exit(1)


@cache_app.command("gc")
def gc(
    *,
    older_than: Annotated[str | None, typer.Option(
        "--older-than", help="Remove unreferenced entries unused for this long (e.g. 24h, 7d). "
        "Default 24h when no --keep-storage is given.")] = None,
    keep_storage: Annotated[str | None, typer.Option(
        "--keep-storage", help="Then remove least recently used unreferenced entries until the "
        "cache is at most this big (e.g. 20GB).")] = None,
    kind: KindOpt = None, agent: AgentOpt = None, token: TokenOpt = None,
    address: CleanAddressOpt = None, dry_run: DryRunOpt = False, yes: YesOpt = False,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """Remove unreferenced entries, oldest last use first, until the budget holds.

    Never removes an entry that is referenced or being built, even when a create races the gc.
    Shows the plan and asks [y/N] unless --yes. With --address of a Ray cluster, removes old
    sessions' caches (never the live session's) and, in each node's rtenv store, the entries
    the plugin no longer holds (Ray released them: no live worker uses them).

    Example:

        $ rtenv cache gc --older-than 7d --dry-run

        $ rtenv cache gc --keep-storage 20GB --yes
    """
    _clean(Output(fmt.value), agent=agent, token=token, address=address, dry_run=dry_run,
           yes=yes, purge=False, older_than=older_than, keep_storage=keep_storage,
           kinds=_kinds(kind))


@cache_app.command("purge")
def purge(
    *,
    agent: AgentOpt = None, token: TokenOpt = None, address: CleanAddressOpt = None,
    kind: KindOpt = None, dry_run: DryRunOpt = False, yes: YesOpt = False,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """Remove every unreferenced entry (referenced ones and builds in progress stay).

    Example:

        $ rtenv cache purge --dry-run

        $ rtenv cache purge --yes
    """
    _clean(Output(fmt.value), agent=agent, token=token, address=address, dry_run=dry_run,
           yes=yes, purge=True, kinds=_kinds(kind))


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")
