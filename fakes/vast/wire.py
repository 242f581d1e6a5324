"""FakeVast's wire: requests and replies, and every body rendered from recordings/vast (H1).

Each body starts as a recording's own JSON (``load_recording``) and only its *values* change:
ids, labels, statuses. No key is ever added that the recording lacks, so a parser tested on
the recordings reads the fake's answers unchanged. The recorded ids (offer 1234567, instance
1234568) are re-addressed inside error texts, as a real answer about another id would read.

The only bodies not from a recording are the fake's own loud errors (``fake_vast_*``: an
unknown route, a request no real client sends) and ``invalid_request``, whose shape is quoted
in Vast's public documentation but not yet recorded.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fakes.seam import JSON, Reply, Request
from gpuops.providers import Recording, load_recording

if TYPE_CHECKING:
    from fakes.vast.model import InstanceState, KeyState

# The ids the recordings use (recordings/vast/README.md).
RECORDED_OFFER_ID = 1234567
RECORDED_INSTANCE_ID = 1234568
LABEL_EXAMPLE_ID = 12345  # label_instance.yaml's example instance
__all__ = ["JSON", "Reply", "Request"]  # the seam's (fakes/seam.py), re-exported


@functools.cache
def recording(name: str) -> Recording:
    return load_recording("vast", name)


def recorded(name: str) -> Any:
    """A fresh copy of the recording's JSON body."""
    return json.loads(recording(name).body)


def _reply(name: str, doc: object = None, *, status: int | None = None) -> Reply:
    rec = recording(name)
    body = rec.body if doc is None else json.dumps(doc)
    return Reply(rec.status if status is None else status, rec.headers, body)


def readdressed(doc: Any, old: int, new: int) -> Any:
    """``doc`` with the recorded id ``old`` replaced by ``new``, as a number or a whole word."""
    word = re.compile(rf"\b{old}\b")
    if isinstance(doc, dict):
        return {k: readdressed(v, old, new) for k, v in doc.items()}
    if isinstance(doc, list):
        return [readdressed(v, old, new) for v in doc]
    if isinstance(doc, str):
        return word.sub(str(new), doc)
    if isinstance(doc, int) and not isinstance(doc, bool) and doc == old:
        return new
    return doc


# --- offers and creates ---------------------------------------------------------------------------
def offers(rows: Sequence[Mapping[str, object]]) -> Reply:
    """search_offers: ``{"offers": [...]}``."""
    doc = recorded("search_offers")
    doc["offers"] = [dict(row) for row in rows]
    return _reply("search_offers", doc)


def created(instance_id: int, instance_key: str) -> Reply:
    """create_success: ``new_contract`` is the new instance id, and ``instance_api_key`` its
    per-instance key (optional in CreateInstanceResponse, vast-ai/vast-cli vastai/data/
    instance.py; the docs' example body does not show it)."""
    doc = recorded("create_success")
    doc["new_contract"] = instance_id
    doc["instance_api_key"] = instance_key
    return _reply("create_success", doc)


def invalid_args(offer_id: int, problem: str) -> Reply:
    """create_400_invalid_args about ``offer_id``: a create the contract refuses, its msg
    naming what was refused (which msg Vast gives for each is not published)."""
    doc = recorded("create_400_invalid_args")
    doc.update(msg=f"Invalid args: {problem}", ask_id=offer_id)
    return _reply("create_400_invalid_args", doc)


def no_such_ask(offer_id: int, status: int) -> Reply:
    """create_no_such_ask_{400,404,410}, about ``offer_id``."""
    name = f"create_no_such_ask_{status}"
    return _reply(name, readdressed(recorded(name), RECORDED_OFFER_ID, offer_id))


# --- instances ------------------------------------------------------------------------------------
# Row fields that are the rented offer's own (same name, same meaning in search and rows).
FROM_OFFER = (
    "cpu_arch", "cpu_cores", "cpu_cores_effective", "cpu_name", "cpu_ram", "gpu_arch", "gpu_frac",
    "gpu_lanes", "gpu_mem_bw", "bw_nvlink", "cuda_max_good", "driver_version", "disk_name",
    "disk_bw", "direct_port_count", "static_ip", "hosting_type", "min_bid", "is_bid", "dph_base",
    "dlperf", "dlperf_per_dphtotal", "flops_per_dphtotal", "total_flops", "score", "os_version",
    "mobo_name", "pci_gen", "pcie_bw", "inet_up", "inet_down", "logo", "webpage", "storage_cost",
    "vram_costperhour", "credit_discount_max", "external", "bundle_id",
)  # fmt: skip


def instance_row(
    box: InstanceState, status: str | None, *, start_date: float | None = None, age_s: float = 0.0
) -> dict[str, object]:
    """A row in show_running's shape; ``ports`` only while running (show_loading has none).
    ``start_date``: the wall-clock epoch the client reads (default: the fake's own time);
    ``age_s``: how long ago that was, the row's ``duration``."""
    row = dict(_row_template())
    del row["ports"]
    started = box.created_at if start_date is None else start_date
    shift = started - row["start_date"]
    offer = box.offer_row
    row.update({name: offer[name] for name in FROM_OFFER if name in offer})
    row.update(
        search=dict(offer.get("search") or row["search"]),
        instance=dict(offer.get("instance") or row["instance"]),
        duration=max(0.0, age_s),
        gpu_util=row["gpu_util"] if status == "running" else None,
        gpu_temp=row["gpu_temp"] if status == "running" else None,
    )
    row.update(
        id=box.id,
        actual_status=status,
        label=box.label,
        image_uuid=box.image,
        image_args=[],
        image_runtype=box.runtype,
        extra_env=[[str(k), str(v)] for k, v in box.env.items()],
        onstart=box.onstart,
        status_msg=f"success, running {box.image.replace(':', '_')}/ssh"
        if status == "running"
        else None,
        public_ipaddr=offer["public_ipaddr"],
        ssh_host=box.ssh_host,
        ssh_idx=box.ssh_host.removeprefix("ssh").split(".")[0],
        ssh_port=box.ssh_port,
        machine_dir_ssh_port=box.ssh_port + 1,
        machine_id=offer["machine_id"],
        host_id=offer["host_id"],
        start_date=started,
        end_date=row["end_date"] + shift,
        gpu_name=offer["gpu_name"],
        num_gpus=offer["num_gpus"],
        gpu_ram=offer["gpu_ram"],
        gpu_totalram=offer["gpu_total_ram"],
        disk_space=box.disk_gb,
        direct_port_start=box.direct_port,
        direct_port_end=box.direct_port + 2,
        geolocation=offer["geolocation"],
        verification=offer["verification"],
        dph_total=offer["dph_total"],
        reliability2=offer["reliability2"],
    )
    if status == "running":
        ports = json.loads(json.dumps(_row_template()["ports"]))  # a copy of the recorded map
        ports["22/tcp"][0]["HostPort"] = str(box.direct_port)
        row["ports"] = ports
    return dict(row)


@functools.cache
def _row_template() -> Mapping[str, Any]:
    """show_running's row; its only nested values (image_args, extra_env, ports) are replaced
    or copied by instance_row, so a shallow copy per row is safe."""
    row: dict[str, Any] = recorded("show_running")["instances"]
    if set(row["ports"]) != {"22/tcp"} or row["image_args"] != []:
        raise AssertionError("show_running.yaml changed shape; update wire.instance_row")
    return row


def show(row: Mapping[str, object] | None) -> Reply:
    """show_running's envelope around ``row``, or show_gone: ``{"instances": null}``."""
    if row is None:
        return _reply("show_gone")
    doc = recorded("show_running")
    doc["instances"] = dict(row)
    return _reply("show_running", doc)


def page(
    rows: Sequence[Mapping[str, object]],
    *,
    total: int,
    label_counts: Mapping[str, int] | str,
    next_token: str | None,
) -> Reply:
    """list_instances_page1's envelope (v1 list: 25 a page, ``next_token`` null at the end).
    ``label_counts`` may come already encoded (JSON text): every page of a listing carries the
    whole account's counts, so a listing of 5,000 differently labelled boxes encodes them once,
    not once a page. The body is the one ``json.dumps`` of the envelope would give."""
    doc = recorded("list_instances_page1")
    doc.update(
        instances_found=len(rows),
        total_instances=total,
        label_counts=None,
        next_token=next_token,
        instances=[dict(row) for row in rows],
    )
    counts = label_counts if isinstance(label_counts, str) else json.dumps(dict(label_counts))
    fields = [
        f"{json.dumps(key)}: {counts if key == 'label_counts' else json.dumps(value)}"
        for key, value in doc.items()
    ]
    rec = recording("list_instances_page1")
    return Reply(rec.status, rec.headers, "{" + ", ".join(fields) + "}")


def labelled(instance_id: int, label: str) -> Reply:
    """label_success, about ``instance_id`` and its new label."""
    doc = recorded("label_success")
    doc["msg"] = f"label for {instance_id} set to '{label}'"
    return _reply("label_success", doc)


def label_too_long() -> Reply:
    return _reply("label_too_long")


def label_gone(instance_id: int) -> Reply:
    """label_404: the documented no_such_instance, about ``instance_id``."""
    return _reply("label_404", readdressed(recorded("label_404"), LABEL_EXAMPLE_ID, instance_id))


def current_user(ssh_key: str | None) -> Reply:
    """user_current: the account (never its API key), with our first live key."""
    doc = recorded("user_current")
    if ssh_key is not None:
        doc["ssh_key"] = ssh_key
    return _reply("user_current", doc)


def current_member(user_id: int, username: str, email: str) -> Reply:
    """user_current_member: a team member's own key answers with that member."""
    doc = recorded("user_current_member")
    doc.update(id=user_id, username=username, email=email, sid=f"{user_id}-fake-sid")
    return _reply("user_current_member", doc)


def destroyed() -> Reply:
    return _reply("destroy_success")


def gone(instance_id: int, error: str) -> Reply:
    """destroy_404_no_such_instance or destroy_404_not_found, about ``instance_id``."""
    name = f"destroy_404_{error}"
    return _reply(name, readdressed(recorded(name), RECORDED_INSTANCE_ID, instance_id))


# --- ssh keys -------------------------------------------------------------------------------------
def ssh_keys(keys: Iterable[KeyState]) -> Reply:
    """ssh_keys_list: a bare array of {id, user_id, key, created_at, deleted_at}."""
    template = recorded("ssh_keys_list")[0]
    rows = [
        {
            **template,
            "id": k.id,
            "key": k.key,
            "created_at": k.created_at,
            "deleted_at": k.deleted_at,
        }
        for k in keys
    ]
    return _reply("ssh_keys_list", rows)


def ssh_key_registered(key: KeyState) -> Reply:
    """ssh_key_register: {success, key: {id, user_id, public_key, created_at, deleted_at}}."""
    doc = recorded("ssh_key_register")
    doc["key"].update(id=key.id, public_key=key.key, created_at=key.created_at, deleted_at=None)
    return _reply("ssh_key_register", doc)


def no_ssh_key(problem: str | None = None) -> Reply:
    """ssh_key_register_400: the documented 400 for a register without a key; ``problem``:
    the same shape for a key the contract refuses, its msg naming what was refused."""
    doc = recorded("ssh_key_register_400")
    if problem is not None:
        doc["msg"] = f"Invalid ssh key: {problem}"
    return _reply("ssh_key_register_400", doc)


# --- failures -------------------------------------------------------------------------------------
def unauthorized() -> Reply:
    """auth_401: a missing or wrong key, on any route."""
    return _reply("auth_401")


def rate_limited(
    body: str, *, now: float, retry_after_s: float | None = None, threshold: float | None = None
) -> Reply:
    """A 429: ``plain`` (create_429_plain), ``json`` (create_429_detail), ``json-error``
    (destroy_429), ``search-quota`` (search_quota_exceeded, reset at the next UTC midnight) or
    ``threshold`` (endpoint_429_threshold: an endpoint's minimum interval, ``threshold``)."""
    if body == "threshold":
        rec = recording("endpoint_429_threshold")
        text = rec.body if threshold is None else rec.body.replace("4.5", f"{threshold:g}")
        return Reply(rec.status, rec.headers, text)
    names = {
        "plain": "create_429_plain",
        "json": "create_429_detail",
        "json-error": "destroy_429",
        "search-quota": "search_quota_exceeded",
    }
    rec = recording(names[body])
    headers = rec.headers
    if body == "search-quota":
        today = dt.datetime.fromtimestamp(now, dt.UTC).date()
        midnight = dt.datetime.combine(today + dt.timedelta(days=1), dt.time(), dt.UTC)
        headers = tuple(
            (k, str(int(midnight.timestamp())) if k.lower() == "x-ratelimit-reset" else v)
            for k, v in headers
        )
    if retry_after_s is not None:
        headers += (("Retry-After", f"{retry_after_s:g}"),)
    return Reply(rec.status, headers, rec.body)


def unavailable(status: int = 503) -> Reply:
    """unavailable_503 (empty body: no capture of a Vast 5xx body exists), any 5xx status."""
    return _reply("unavailable_503", status=status)


def dropped() -> Reply:
    """No answer at all: the connection closes after the request was acted on."""
    return Reply(0, (), "", drop=True)


def invalid_query(problem: str) -> Reply:
    """400 invalid_request, the documented shape of a bad filter (provider-formats.md A.6)."""
    body = {"error": "invalid_request", "msg": f"Error in query parameters: {problem}"}
    return Reply(400, JSON, json.dumps(body))


def unknown_route(method: str, path: str, known: Sequence[str]) -> Reply:
    """The fake's own loud 404: what was asked, and every route it knows."""
    body = {
        "success": False,
        "error": "fake_vast_unknown_route",
        "msg": f"FakeVast has no route {method} {path}",
        "known_routes": list(known),
    }
    return Reply(404, JSON, json.dumps(body))


def bad_request(message: str) -> Reply:
    """The fake's own loud 400: a request no Vast client sends (a bug in the caller)."""
    body = {"success": False, "error": "fake_vast_bad_request", "msg": message}
    return Reply(400, JSON, json.dumps(body))


def iso(epoch_s: float) -> str:
    """The recordings' timestamp form, ``2026-11-02T09:14:51Z``."""
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
