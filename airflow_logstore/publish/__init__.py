"""Publishing: committed snapshots become the visibility watermark in the control topic.

- ``publisher``: ``publish_visible_offsets`` (what the publish operator and ``logstore publish`` run).
"""
