"""The packed-shard format in one place: what ``gpupipe.pack`` writes and ``gpupipe.sources`` and
``gpupipe.remote`` read.

``format``: shard and index names, the DALI index file, the tar members of one sample and each target
kind's member, the manifest's fields and checks. ``tarindex``: a tar's member index built from its
headers, every size checked before a read. This package imports nothing on its own.
"""
