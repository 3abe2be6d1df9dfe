"""ddpc.hub: checkpoints fetched from a URL once and then read from a cache
on disk, as torch.hub's ``load_state_dict_from_url`` (also
``ddpc.utils.model_zoo.load_url``) and ``download_url_to_file``.

The cache directory (``get_dir``) is ``set_dir``'s, else ``$DDPC_HOME/hub``,
else ``$TORCH_HOME/hub`` (clusters point TORCH_HOME at shared storage, and
the files are the same torch.save checkpoints ddpc.load reads), else
``$XDG_CACHE_HOME/ddpc/hub`` (``~/.cache/ddpc/hub``). Where ddpc differs:
no progress bar is drawn, the legacy zip checkpoints of PyTorch < 1.6 are not
read, and ``load`` (models from GitHub repositories) is not supported."""

import hashlib
import os
import re
import shutil
import sys
import tempfile
import urllib.parse
import urllib.request

from .serialization import load as _load

__all__ = ["download_url_to_file", "get_dir", "load", "load_state_dict_from_url", "set_dir"]

# A file name's "-<hex digits>." part is the start of its SHA-256 (torchvision's "resnet18-f37072fd.pth").
HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")
_CHUNK = 1 << 20

_hub_dir = None


def get_dir():
    """The directory checkpoints are cached under (in its ``checkpoints`` folder)."""
    if _hub_dir is not None:
        return _hub_dir
    for var in ("DDPC_HOME", "TORCH_HOME"):
        if os.environ.get(var):
            return os.path.join(os.path.expanduser(os.environ[var]), "hub")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return os.path.join(os.path.expanduser(cache), "ddpc", "hub")


def set_dir(d):
    """Caches checkpoints under ``d`` from now on, whatever the environment says."""
    global _hub_dir
    _hub_dir = os.path.expanduser(os.fspath(d))


def download_url_to_file(url, dst, hash_prefix=None, progress=True):
    """Downloads ``url`` to the path ``dst``, through a temporary file next to it
    so that ``dst`` never holds part of a file. With ``hash_prefix``, the file's
    SHA-256 must start with it, else RuntimeError and nothing is written."""
    del progress  # no progress bar: load_state_dict_from_url says what it downloads
    dst = os.path.expanduser(os.fspath(dst))
    sha256 = hashlib.sha256()
    request = urllib.request.Request(url, headers={"User-Agent": "ddpc.hub"})
    tmp = tempfile.NamedTemporaryFile(dir=os.path.dirname(os.path.abspath(dst)), prefix=".download-", delete=False)
    try:
        with tmp, urllib.request.urlopen(request) as response:
            while chunk := response.read(_CHUNK):
                tmp.write(chunk)
                sha256.update(chunk)
        digest = sha256.hexdigest()
        if hash_prefix is not None and not digest.startswith(hash_prefix):
            raise RuntimeError(f'download of {url}: invalid hash value (expected "{hash_prefix}", got "{digest}")')
        shutil.move(tmp.name, dst)
    finally:
        if os.path.exists(tmp.name):
            os.remove(tmp.name)


def load_state_dict_from_url(url, model_dir=None, map_location=None, progress=True, check_hash=False,
                             file_name=None, weights_only=False):
    """The object saved at ``url`` (a torch.save or ddpc.save checkpoint), read
    with ddpc.load from ``model_dir`` (``get_dir()/checkpoints``), where it is
    downloaded first unless a file of that name (``file_name``, else the URL's
    last part) is there already. ``check_hash``: the download's SHA-256 must
    start with the hex digits after the file name's last "-" (see HASH_REGEX)."""
    if model_dir is None:
        model_dir = os.path.join(get_dir(), "checkpoints")
    os.makedirs(model_dir, exist_ok=True)
    filename = file_name if file_name is not None else os.path.basename(urllib.parse.urlparse(url).path)
    cached_file = os.path.join(model_dir, filename)
    if not os.path.exists(cached_file):
        sys.stderr.write(f'Downloading: "{url}" to {cached_file}\n')
        match = HASH_REGEX.search(filename) if check_hash else None
        download_url_to_file(url, cached_file, match.group(1) if match else None, progress=progress)
    return _load(cached_file, map_location=map_location, weights_only=weights_only)


def load(repo_or_dir, model, *args, **kwargs):
    """Not supported: ddpc does not run hubconf.py code from repositories.
    Build the model in the script and load its weights with load_state_dict_from_url."""
    raise NotImplementedError(f"ddpc.hub.load({repo_or_dir!r}, {model!r}): loading models from hub repositories is "
                              "not supported; build the model in code and load its weights with "
                              "ddpc.hub.load_state_dict_from_url")
