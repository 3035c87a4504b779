#!/usr/bin/env bash
# Entry point of the VND images: source ROS 2 and the VND workspace, then run the command
# (default: an interactive shell), e.g. `ros2 launch /vnd/launch/vnd_flight.launch.yaml ...`.
set -eo pipefail

if [ ! -f "/opt/ros/${ROS_DISTRO}/setup.bash" ]; then
    echo "entrypoint: /opt/ros/${ROS_DISTRO}/setup.bash not found (ROS_DISTRO=${ROS_DISTRO})" >&2
    exit 1
fi
# The setup scripts read unset variables: never run them under `set -u`.
source "/opt/ros/${ROS_DISTRO}/setup.bash"
source "${VND_WS:-/vnd/ros2_ws}/install/setup.bash"

exec "$@"
