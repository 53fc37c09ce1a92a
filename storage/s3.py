"""Reaching the lake's filesystem: a local dir, or an S3 bucket (created if missing) through
pyarrow's S3 filesystem with short time-outs, so a store that does not answer says so in
seconds (LakeError); and the one S3 chore pyarrow has no call for, aborting unfinished
multipart uploads under a prefix (boto3, same endpoint and credentials)."""

from __future__ import annotations

import logging
import os
from urllib.parse import urlparse

import pyarrow.fs as pafs

log = logging.getLogger("flywheel.lake")


def endpoint_url(endpoint: str | None) -> str | None:
    """An endpoint as a URL (`host:port` means http)."""
    if not endpoint:
        return None
    return endpoint if "://" in endpoint else f"http://{endpoint}"


def make_filesystem(uri: str, endpoint: str | None = None, region: str = "us-east-1"):
    """Return (filesystem, root path inside it) for a local dir or an s3:// URI."""
    if not uri.startswith("s3://"):
        root = os.path.abspath(uri)
        os.makedirs(root, exist_ok=True)
        return pafs.LocalFileSystem(), root
    parsed = urlparse(uri)
    kwargs: dict = {"region": region, "connect_timeout": 3, "request_timeout": 10}
    if endpoint:
        ep = urlparse(endpoint_url(endpoint))
        kwargs.update(endpoint_override=ep.netloc, scheme=ep.scheme or "http")
    fs = pafs.S3FileSystem(
        **kwargs,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3),
        allow_bucket_creation=True,
    )
    bucket, root = parsed.netloc, (parsed.netloc + parsed.path).rstrip("/")
    try:
        info = fs.get_file_info(bucket)
        if info.type == pafs.FileType.NotFound:
            fs.create_dir(bucket)
    except OSError as exc:
        from flywheel.storage.lake import LakeError  # the lake's error, raised where the lake is opened

        raise LakeError(f"cannot reach the S3 store {uri} at endpoint {endpoint}: {exc}") from exc
    return fs, root


def abort_multipart_uploads(prefix: str, endpoint: str | None, region: str) -> int:
    """Abort the unfinished multipart uploads under `bucket/key-prefix`; best effort (the
    data they hold is invisible to readers anyway). Returns how many were aborted."""
    import boto3

    bucket, _, key_prefix = prefix.partition("/")
    s3 = boto3.client("s3", endpoint_url=endpoint_url(endpoint), region_name=region)
    aborted = 0
    try:
        for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=key_prefix):
            for upload in page.get("Uploads", []):
                s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                aborted += 1
    except Exception as exc:
        log.warning("could not list or abort multipart uploads under %s: %s", prefix, exc)
    return aborted
