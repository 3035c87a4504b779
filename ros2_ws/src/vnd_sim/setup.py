"""ament_python package that is also pip-installable (``pip install -e .``)."""

from setuptools import find_packages, setup

PACKAGE_NAME = "vnd_sim"

setup(
    name=PACKAGE_NAME,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE_NAME]),
        ("share/" + PACKAGE_NAME, ["package.xml"]),
    ],
    install_requires=["vnd_core", "vnd_flight", "vnd_ros"],
    zip_safe=True,
    maintainer="VND flight stack developers",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "sim_node = vnd_sim.sim_node:main",
            "odom_fault_node = vnd_sim.odom_fault_node:main",
        ],
    },
)
