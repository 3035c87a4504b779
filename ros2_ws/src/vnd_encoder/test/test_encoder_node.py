"""The encoder node as a real OS process: context filling, validity, gaps, bundle swaps."""

from __future__ import annotations

import time

import numpy as np
from vnd_flight.msgfields import set_stamp, stamp_ns
from vnd_ros.qos import qos_profile_default, qos_profile_sensor_data, qos_profile_status

MAX_GAP_MS = 150.0


def test_latent_valid_after_c_ticks_invalid_after_gap_and_without_model(
    harness, bundles, middleware
):
    H = harness
    c = H.CONTEXT_LEN
    d = H.SMALL_MODEL.action_delay_ticks  # transitions wait for their 2-tick-old action
    node = H.NodeProcess(
        "vnd_encoder.encoder_node",
        [
            "-r",
            "__ns:=/et",
            "-p",
            f"bundle:={bundles['v1']}",
            "-p",
            "smoke_budget_us:=10000000.0",
            "-p",
            "status_period_s:=0.25",
            "-p",
            f"max_gap_ms:={MAX_GAP_MS}",  # generous: the test process itself may stall
        ],
    )
    peer = H.Peer("/et")
    try:
        odom_cls, odom_pub = peer.publisher(
            "nav_msgs/msg/Odometry", "odom", qos_profile_sensor_data
        )
        ctbr_cls, ctbr_pub = peer.publisher(
            "vnd_msgs/msg/CtbrCommand", "vnd/command", qos_profile_sensor_data
        )
        ckpt_cls, ckpt_pub = peer.publisher(
            "vnd_msgs/msg/CheckpointCommand", "vnd/checkpoint/command", qos_profile_default
        )
        latents = peer.record("vnd_msgs/msg/Latent", "vnd/latent", qos_profile_sensor_data)
        replies = peer.record(
            "vnd_msgs/msg/CheckpointStatus", "vnd/checkpoint/status", qos_profile_default
        )
        status = peer.record("vnd_msgs/msg/NodeStatus", "vnd/node_status", qos_profile_status)
        peer.start()
        node.wait_log("encoder node ready")
        H.wait_for(lambda: status, 10.0, "the first status (discovery)")
        rng = np.random.default_rng(0)

        def fly(ticks: int) -> list[int]:
            """``ticks`` control ticks at 50 Hz: odometry, then the command answering it."""
            stamps = []
            for _ in range(ticks):
                stamp = time.time_ns()
                state = H.hover_state()
                state[7:10] = rng.normal(scale=0.2, size=3)
                odom_pub.publish(H.odometry_message(odom_cls, stamp, state))
                time.sleep(0.005)
                cmd = ctbr_cls(thrust_n=7.0 + rng.normal(), body_rate_radps=[0.1, -0.1, 0.0])
                set_stamp(cmd.header.stamp, stamp)
                ctbr_pub.publish(cmd)
                stamps.append(stamp)
                time.sleep(0.015)
            return stamps

        stamps = fly(2 * c + 4)
        H.wait_for(lambda: len(latents) >= 2 * c + 3, 5.0, "one latent per paired command")
        # (slices: the gap latent after the last command may already be in)
        valid = [m.valid for _, m in latents][: 2 * c + 3]
        # the first command has no earlier action, the next d lack their delayed action;
        # then C more make the window full
        assert valid == [False] * (c + d) + [True] * (c + 3 - d), valid
        for _, msg in latents[: 2 * c + 3]:
            assert msg.encoder_version == 1 and stamp_ns(msg.header.stamp) in stamps
            assert len(msg.z) == (8 if msg.valid else 0)
        assert np.isfinite([z for _, m in latents for z in m.z]).all()

        # commands stop: the gap timer announces an invalid latent; refilling takes C ticks
        mark = len(latents)
        time.sleep(2 * MAX_GAP_MS / 1000)
        assert [m.valid for _, m in latents[mark:]] == [False]
        mark = len(latents)
        fly(c + d + 2)
        H.wait_for(lambda: len(latents) >= mark + c + d + 2, 5.0, "latents after the gap")
        valid = [m.valid for _, m in latents[mark : mark + c + d + 2]]
        assert valid == [False] * (c + d) + [True] * 2, valid

        # a bundle without a VND model: invalid latents carrying that bundle's version
        ckpt_pub.publish(ckpt_cls(request_id="l3", action=1, path=str(bundles["v3"])))
        H.wait_for(lambda: any(m.request_id == "l3" for _, m in replies), 15.0, "load answer")
        ckpt_pub.publish(ckpt_cls(request_id="a3", action=2, version=3))
        answer = H.wait_for(
            lambda: next((m for _, m in replies if m.request_id == "a3"), None), 5.0, "activate"
        )
        assert answer.accepted and answer.active_version == 3 and answer.node == "/et/encoder"
        mark = len(latents)
        fly(c + 3)
        H.wait_for(lambda: len(latents) >= mark + c + 3, 5.0, "latents of v3")
        assert all(not m.valid and m.encoder_version == 3 for _, m in latents[mark:])
        H.wait_for(lambda: status[-1][1].active_version == 3, 2.0, "a status with version 3")
        assert status[-1][1].previous_version == 1
    finally:
        peer.close()
        node.stop()
