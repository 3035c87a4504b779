"""ament_python package that is also pip-installable (``pip install -e .``)."""

from setuptools import find_packages, setup

PACKAGE_NAME = "vnd_ros"

setup(
    name=PACKAGE_NAME,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE_NAME]),
        ("share/" + PACKAGE_NAME, ["package.xml"]),
    ],
    install_requires=[
        "vnd_core",
        "cyclonedds>=11.0.1,<11.1",  # private APIs: vnd_ros.cyclone_compat
        "rosbags>=0.10",
        "mcap>=1.1",
        "pyyaml>=6",
        "numpy>=1.24",
    ],
    package_data={PACKAGE_NAME: ["msg_defs/*/msg/*.msg"]},
    zip_safe=False,
    maintainer="VND flight stack developers",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [],
    },
)
