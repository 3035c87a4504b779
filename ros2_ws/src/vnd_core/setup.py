"""ament_python package that is also pip-installable (``pip install -e .``)."""

from setuptools import find_packages, setup

PACKAGE_NAME = "vnd_core"

setup(
    name=PACKAGE_NAME,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE_NAME]),
        ("share/" + PACKAGE_NAME, ["package.xml"]),
    ],
    install_requires=[
        "torch>=2.2,<3",
        "numpy>=1.24",
        "pyyaml>=6",
        "safetensors>=0.4",
        "transforms3d>=0.4",
        "matplotlib>=3.7",
        "rich>=13",
        "rosbags>=0.10",
        "mcap>=1.1",
        "pyulog>=1.0",
    ],
    package_data={PACKAGE_NAME: ["data/*.safetensors"]},
    zip_safe=False,
    maintainer="VND flight stack developers",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [],
    },
)
