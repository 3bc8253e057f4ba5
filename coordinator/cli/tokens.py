"""`coordinator join-token ...` and `coordinator admin-token ...`: the two kinds of token an
operator hands out, one to let machines register, one to use the admin API."""

from __future__ import annotations

import click

from coordinator.cli.formatting import admin_tokens_lines, join_tokens_lines
from coordinator.cli.plumbing import (
    call,
    complete_clusters,
    echo_lines,
    emit,
    output_option,
    parse_duration,
    say,
)


@click.group("join-token")
def join_token() -> None:
    """Join tokens let agents register into one cluster or the pool; each has a TTL and a use
    limit."""


@join_token.command("create")
@click.argument("cluster_name", required=False, shell_complete=complete_clusters)
@click.option("--pool", is_flag=True, help="A token into the machine pool, not a cluster: "
              "clusters claim its machines by their spec's pool: section.")
@click.option("--auto-approve", is_flag=True, help="With --pool: approve its machines into "
              "the pool once their prechecks pass.")
@click.option("--ttl", default="24h", show_default=True, help="Lifetime, e.g. 15m, 24h, 7d; 0: forever.")
@click.option("--max-uses", type=click.IntRange(min=1), help="Registrations allowed (default: unlimited).")
@click.option("--token-only", is_flag=True, help="Print the bare token instead of the join string.")
@click.pass_context
def join_token_create(ctx: click.Context, cluster_name: str | None, pool: bool,
                      auto_approve: bool, ttl: str, max_uses: int | None,
                      token_only: bool) -> None:
    """Create a join token into CLUSTER_NAME, or into the pool (--pool), and print its join
    string (shown once; only its hash is kept). The string alone goes to stdout, for
    scripts; its id, which `join-token revoke` takes, to stderr."""
    if pool == bool(cluster_name):
        raise click.UsageError("give a cluster's name or --pool (a token into the pool), "
                               "one of them")
    if auto_approve and not pool:
        raise click.UsageError("--auto-approve is for pool tokens: a cluster's machines follow "
                               "its settings.autoApprove")
    parse_duration(ttl, "--ttl")
    data = call(ctx, "POST", "/v1/pool/join-tokens" if pool else
                f"/v1/clusters/{cluster_name}/join-tokens",
                body={"ttl": ttl, "maxUses": max_uses, "autoApprove": auto_approve})
    say(data["token"] if token_only else data["join"])
    say(f"join token {data['id']} (revoke it: coordinator join-token revoke {data['id']})",
        err=True)


@join_token.command("list")
@click.argument("cluster_name", required=False, shell_complete=complete_clusters)
@click.option("--pool", is_flag=True, help="Only the pool's tokens.")
@output_option
@click.pass_context
def join_token_list(ctx: click.Context, cluster_name: str | None, pool: bool,
                    output: str) -> None:
    """List join tokens (ids only: the secrets are not kept)."""
    data = call(ctx, "GET", "/v1/pool/join-tokens" if pool else
                f"/v1/clusters/{cluster_name}/join-tokens" if cluster_name
                else "/v1/join-tokens")
    if not emit(data, output):
        echo_lines(join_tokens_lines(data))


@join_token.command("revoke")
@click.argument("token_id")
@click.pass_context
def join_token_revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke a join token: no machine can register with it any more."""
    call(ctx, "DELETE", f"/v1/join-tokens/{token_id}")
    say(f"join token {token_id} revoked")


@click.group("admin-token")
def admin_token() -> None:
    """Tokens for the admin API: role admin (everything) or read-only."""


@admin_token.command("create")
@click.argument("name")
@click.option("--role", type=click.Choice(["admin", "read-only"]), default="read-only",
              show_default=True)
@click.pass_context
def admin_token_create(ctx: click.Context, name: str, role: str) -> None:
    """Create an admin API token and print it (shown once)."""
    say(call(ctx, "POST", "/v1/admin-tokens", body={"name": name, "role": role})["token"])


@admin_token.command("list")
@output_option
@click.pass_context
def admin_token_list(ctx: click.Context, output: str) -> None:
    data = call(ctx, "GET", "/v1/admin-tokens")
    if not emit(data, output):
        echo_lines(admin_tokens_lines(data))


@admin_token.command("revoke")
@click.argument("token_id")
@click.pass_context
def admin_token_revoke(ctx: click.Context, token_id: str) -> None:
    call(ctx, "DELETE", f"/v1/admin-tokens/{token_id}")
    say(f"admin token {token_id} revoked")
